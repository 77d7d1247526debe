package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// decodeLine decodes one line of `enqueue batch` or `enqueue workflow`
// input, a JSON object, into v: strictly, as an enqueue of one job would
// take it. Unknown fields, a second object on the line and names that
// decoding would alter are refused; the error names the field, not the
// line.
func decodeLine(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON object")
	}
	return alteredName(line)
}

// alteredName names the field of the JSON object line, args aside, whose
// string Go's decoder would alter: bytes that are not UTF-8 and escaped
// lone surrogates ("\ud800") both become U+FFFD, so a kind "k\xff" would
// be stored as another name, one no worker serves (`enqueue job` and the
// Go client refuse it). Args are left to jobs.CheckArgs, which sees their
// bytes as they are and names the path of one that is not UTF-8.
func alteredName(line []byte) error {
	if utf8.Valid(line) && !bytes.Contains(line, []byte(`\u`)) {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if strings.EqualFold(k, "args") {
			continue
		}
		var elems []json.RawMessage
		if json.Unmarshal(fields[k], &elems) != nil {
			if err := stringProblem(k, fields[k]); err != nil {
				return err
			}
			continue
		}
		for i, e := range elems {
			if err := stringProblem(fmt.Sprintf("%s[%d]", k, i), e); err != nil {
				return err
			}
		}
	}
	return nil
}

// stringProblem says what would alter field's value raw, if anything.
func stringProblem(field string, raw json.RawMessage) error {
	if !utf8.Valid(raw) {
		return notUTF8Value(field, raw)
	}
	if esc := loneSurrogate(raw); esc != "" {
		return fmt.Errorf("%s: %s is a lone surrogate escape, not a character", field, esc)
	}
	return nil
}

// loneSurrogate returns the first \uXXXX escape of the JSON value raw
// that is half of a surrogate pair without its other half, or "".
func loneSurrogate(raw []byte) string {
	for i := 0; i+1 < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' || i+6 > len(raw) {
			i++ // an escape of one character: skip it
			continue
		}
		r := hex4(raw[i+2 : i+6])
		if r >= 0xD800 && r < 0xDC00 && i+12 <= len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
			if lo := hex4(raw[i+8 : i+12]); lo >= 0xDC00 && lo < 0xE000 {
				i += 11 // a pair
				continue
			}
		}
		if r >= 0xD800 && r < 0xE000 {
			return string(raw[i : i+6])
		}
		i += 5
	}
	return ""
}

// hex4 reads four hex digits (a JSON escape's, checked by the decoder).
func hex4(b []byte) uint64 {
	n, _ := strconv.ParseUint(string(b), 16, 32)
	return n
}

// notUTF8Value says that field's value raw is not UTF-8, quoting it with
// its bytes as they are.
func notUTF8Value(field string, raw json.RawMessage) error {
	s, ok := rawString(raw)
	if !ok {
		return fmt.Errorf("%s: holds bytes that are not valid UTF-8", field)
	}
	return fmt.Errorf("%s: %q is not valid UTF-8", field, s)
}

// rawString is the JSON string raw with its escapes resolved and the bytes
// that are not UTF-8 kept as they are; ok is false when raw is not a
// string. Such bytes are never part of an escape, so the runs between them
// are decoded on their own.
func rawString(raw []byte) (s string, ok bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	body := raw[1 : len(raw)-1]
	var b strings.Builder
	for len(body) > 0 {
		valid := 0
		for valid < len(body) && !invalidAt(body, valid) {
			_, n := utf8.DecodeRune(body[valid:])
			valid += n
		}
		var part string
		if err := json.Unmarshal(append(append([]byte{'"'}, body[:valid]...), '"'), &part); err != nil {
			return "", false
		}
		b.WriteString(part)
		end := valid
		for end < len(body) && invalidAt(body, end) {
			end++
		}
		b.Write(body[valid:end])
		body = body[end:]
	}
	return b.String(), true
}

// invalidAt reports whether b[i] starts no valid UTF-8 encoding.
func invalidAt(b []byte, i int) bool {
	r, n := utf8.DecodeRune(b[i:])
	return r == utf8.RuneError && n == 1
}
