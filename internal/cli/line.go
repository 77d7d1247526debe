package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// decodeLine decodes one line of `enqueue batch` or `enqueue workflow`
// input, a JSON object, into v: strictly, as an enqueue of one job would
// take it. Unknown fields, a second object on the line and names that are
// not UTF-8 are refused; the error names the field, not the line.
func decodeLine(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON object")
	}
	return notUTF8(line)
}

// notUTF8 names the field of the JSON object line, args aside, that holds
// bytes that are not UTF-8: Go's decoder replaces them with U+FFFD, so a
// kind "k\xff" would be stored as another name, one no worker serves
// (`enqueue job` and the Go client refuse it). Args are checked with
// their path by jobs.CheckArgs, which sees their bytes as they are.
func notUTF8(line []byte) error {
	if utf8.Valid(line) {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		raw := fields[k]
		if strings.EqualFold(k, "args") || utf8.Valid(raw) {
			continue
		}
		var elems []json.RawMessage
		if json.Unmarshal(raw, &elems) != nil {
			return notUTF8Value(k, raw)
		}
		for i, e := range elems {
			if !utf8.Valid(e) {
				return notUTF8Value(fmt.Sprintf("%s[%d]", k, i), e)
			}
		}
	}
	return nil
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
