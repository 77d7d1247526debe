package configs

import (
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// redacted replaces a password wherever one is hidden.
const redacted = "xxxxx"

// RedactURI returns uri with its password, if any, replaced by "xxxxx".
//
// It does not parse uri the way the driver does, so a URI the driver
// refuses (a password with an unescaped '/', '@', ':' or '%', a missing or
// misspelt scheme) is redacted too. The password is taken to run from the
// first ':' after the scheme to the last '@' of the whole string: that span
// holds the password under every reading of an ill-formed URI, at the cost
// of hiding more than the password when an option value holds an '@'.
func RedactURI(uri string) string {
	start, end, ok := passwordSpan(uri)
	if !ok {
		return uri
	}
	return uri[:start] + redacted + uri[end:]
}

// Redact returns s with the password of uri replaced by "xxxxx" wherever it
// appears: as written, percent-decoded, or as a quoted fragment (the driver
// quotes the bad part of a URI it refuses). Use it on any text, such as an
// error from the driver, that might quote the URI. Copies of uri in s are
// redacted as RedactURI does; elsewhere every occurrence of the password is
// replaced, so a password that is also a common word or the host name hides
// that word too: a password is never shown, even at the cost of some text.
func Redact(s, uri string) string {
	forms := passwordForms(uri)
	if len(forms) == 0 {
		return s
	}
	parts := strings.Split(s, uri)
	for i, p := range parts {
		for _, f := range forms {
			p = strings.ReplaceAll(p, f, redacted)
		}
		parts[i] = redactQuoted(p, forms)
	}
	return strings.Join(parts, RedactURI(uri))
}

// passwordSpan returns where the password of uri starts and ends, and
// false when uri holds none (no ':' before its last '@', or nothing
// between them).
func passwordSpan(uri string) (start, end int, ok bool) {
	off := 0
	if i := strings.Index(uri, "://"); i >= 0 {
		off = i + len("://")
	}
	rest := uri[off:]
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return 0, 0, false
	}
	colon := strings.Index(rest[:at], ":")
	if colon < 0 || colon+1 == at {
		return 0, 0, false
	}
	return off + colon + 1, off + at, true
}

// password returns the password of uri as written in it, or "".
func password(uri string) string {
	start, end, ok := passwordSpan(uri)
	if !ok {
		return ""
	}
	return uri[start:end]
}

// passwordForms returns the ways uri's password may be spelt in a message:
// as written, decoded and Go-quoted, longest first, so that a form containing another
// is replaced whole.
func passwordForms(uri string) []string {
	pw := password(uri)
	if pw == "" {
		return nil
	}
	forms := []string{pw}
	for _, unescape := range []func(string) (string, error){url.PathUnescape, url.QueryUnescape} {
		if raw, err := unescape(pw); err == nil && raw != "" && raw != pw {
			forms = append(forms, raw)
		}
	}
	for _, f := range forms {
		// as %q quotes it, when that differs ('"', '\', control bytes)
		if q := strconv.Quote(f); q[1:len(q)-1] != f {
			forms = append(forms, q[1:len(q)-1])
		}
	}
	sort.SliceStable(forms, func(i, j int) bool { return len(forms[i]) > len(forms[j]) })
	return forms
}

// redactQuoted replaces each "quoted" fragment of s, of two characters or
// more, that is part of one of the password's forms: the driver quotes the
// offending piece of a URI it cannot parse (`invalid URL escape "%zz"`,
// `invalid host "b:c"`), and with a malformed password that piece can be a
// slice of it.
func redactQuoted(s string, forms []string) string {
	var b strings.Builder
	for {
		open := strings.IndexByte(s, '"')
		if open < 0 {
			break
		}
		closing := strings.IndexByte(s[open+1:], '"')
		if closing < 0 {
			break
		}
		closing += open + 1
		inner := s[open+1 : closing]
		b.WriteString(s[:open+1])
		if len(inner) >= 2 && partOfAny(inner, forms) {
			b.WriteString(redacted)
		} else {
			b.WriteString(inner)
		}
		b.WriteByte('"')
		s = s[closing+1:]
	}
	b.WriteString(s)
	return b.String()
}

func partOfAny(frag string, forms []string) bool {
	for _, f := range forms {
		if strings.Contains(f, frag) {
			return true
		}
	}
	return false
}
