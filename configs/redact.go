package configs

import (
	"errors"
	"io"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// redacted replaces a password wherever one is hidden.
const redacted = "xxxxx"

// RedactURI returns uri with its password, if any, replaced by "xxxxx",
// and the values of options that are secrets (tlsCertificateKeyFilePassword).
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
		return redactQuerySecrets(uri)
	}
	return redactQuerySecrets(uri[:start] + redacted + uri[end:])
}

// querySecrets are the connection-string options whose values are secrets,
// as the text before their value (matched in any letter case): a TLS
// client key's password, under its name and the older one the driver also
// takes, and an AWS session token in authMechanismProperties (whose value
// ends at the next ',' too).
var querySecrets = []struct{ key, stops string }{
	{"tlsCertificateKeyFilePassword=", ""},
	{"sslClientCertificateKeyPassword=", ""},
	{"AWS_SESSION_TOKEN:", ","},
}

// redactQuerySecrets returns s with the value of every secret option
// (querySecrets) replaced by "xxxxx": up to the next '&', '#', quote or
// white space (or the option's own stops). The driver percent-decodes
// option names and values, so a key matches with any of its characters
// percent-encoded too.
func redactQuerySecrets(s string) string {
	for _, q := range querySecrets {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			k, ok := matchDecoded(s[i:], q.key)
			if !ok {
				continue
			}
			v := i + k
			n := strings.IndexAny(s[v:], "&#\"' \t\r\n"+q.stops)
			if n < 0 {
				n = len(s) - v
			}
			b.WriteString(s[:v])
			b.WriteString(redacted)
			s, i = s[v+n:], -1
		}
		b.WriteString(s)
		s = b.String()
	}
	return s
}

// matchDecoded reports whether s begins with key, in any letter case and
// with any character written as a percent-escape, and how many bytes of s
// that takes.
func matchDecoded(s, key string) (int, bool) {
	n := 0
	for k := 0; k < len(key); k++ {
		if n < len(s) && strings.EqualFold(s[n:n+1], key[k:k+1]) {
			n++
			continue
		}
		if n+3 > len(s) || s[n] != '%' {
			return 0, false
		}
		c, err := strconv.ParseUint(s[n+1:n+3], 16, 8)
		if err != nil || !strings.EqualFold(string(rune(c)), key[k:k+1]) {
			return 0, false
		}
		n += 3
	}
	return n, true
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
		return redactQuerySecrets(s)
	}
	// Copies of the URI, redacted or not, keep all but the password.
	red := RedactURI(uri)
	parts := strings.Split(s, uri)
	for i, p := range parts {
		copies := strings.Split(p, red)
		for j, c := range copies {
			for _, f := range forms {
				c = strings.ReplaceAll(c, f, redacted)
			}
			copies[j] = redactQuoted(c, forms)
		}
		parts[i] = strings.Join(copies, red)
	}
	return redactQuerySecrets(strings.Join(parts, red))
}

// uriSchemes start the connection strings RedactURIs finds in text.
var uriSchemes = []string{"mongodb://", "mongodb+srv://"}

// RedactURIs returns s with the password of every connection string in it
// (mongodb:// or mongodb+srv://, in any letter case) replaced by "xxxxx",
// whatever the URI was given as: a value meant for another setting (a
// database name, a log format) is quoted by the error that refuses it.
// A connection string is taken to end at the end of its line or where the
// next one starts, and its password, as RedactURI takes it, to run from
// the first ':' after the scheme to the last '@' before that end: that
// hides it under every reading of an ill-formed URI, at the cost of more
// text when a line holds another '@'.
func RedactURIs(s string) string {
	s = redactQuerySecrets(s)
	if !strings.Contains(s, "@") {
		return s
	}
	lines := strings.SplitAfter(s, "\n")
	for i, line := range lines {
		lines[i] = redactURIsInLine(line)
	}
	return strings.Join(lines, "")
}

func redactURIsInLine(line string) string {
	var b strings.Builder
	for {
		_, e := findScheme(line)
		if e < 0 {
			break
		}
		rest := line[e:]
		if next, _ := findScheme(rest); next >= 0 {
			rest = rest[:next]
		}
		at := strings.LastIndexByte(rest, '@')
		colon := strings.IndexByte(rest[:max(at, 0)], ':')
		if at < 0 || colon < 0 || colon+1 == at { // no password here
			b.WriteString(line[:e])
			line = line[e:]
			continue
		}
		b.WriteString(line[:e+colon+1])
		b.WriteString(redacted)
		line = line[e+at:]
	}
	b.WriteString(line)
	return b.String()
}

// findScheme returns where the first connection string's scheme in s
// starts and ends, or -1, -1 when s holds none.
func findScheme(s string) (start, end int) {
	for i := 0; i < len(s); i++ {
		if s[i] != 'm' && s[i] != 'M' {
			continue
		}
		for _, sc := range uriSchemes {
			if len(s)-i >= len(sc) && strings.EqualFold(s[i:i+len(sc)], sc) {
				return i, i + len(sc)
			}
		}
	}
	return -1, -1
}

// Redactor hides connection-string passwords in the text a process
// prints: the password of every mongodb:// or mongodb+srv:// URI
// (RedactURIs), and the passwords of the URIs it was given wherever they
// appear, in any form Redact knows. It is safe for concurrent use.
type Redactor struct {
	mu   sync.RWMutex
	uris []string
}

// NewRedactor returns a Redactor that knows the passwords of uris.
func NewRedactor(uris ...string) *Redactor {
	r := &Redactor{}
	for _, u := range uris {
		r.Add(u)
	}
	return r
}

// Add makes r hide the password of uri too. A uri without one is ignored.
func (r *Redactor) Add(uri string) {
	if password(uri) == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, u := range r.uris {
		if u == uri {
			return
		}
	}
	r.uris = append(r.uris, uri)
}

// Redact returns s with every password r knows of, and the password of
// every connection string in it, replaced by "xxxxx".
func (r *Redactor) Redact(s string) string {
	r.mu.RLock()
	uris := r.uris
	r.mu.RUnlock()
	for _, u := range uris {
		s = Redact(s, u)
	}
	return RedactURIs(s)
}

// Error returns err with its message redacted by r, nil for nil. It
// unwraps to err, so that errors.Is and errors.As see through it.
func (r *Redactor) Error(err error) error {
	if err == nil {
		return nil
	}
	var re *redactedError
	if errors.As(err, &re) && re.by == r {
		return err
	}
	return &redactedError{msg: r.Redact(err.Error()), err: err, by: r}
}

type redactedError struct {
	msg string
	err error
	by  *Redactor
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Writer returns a writer that redacts each write with r before passing it
// to w. Each write is redacted on its own: a password split across two
// writes is not recognised (fmt's and zap's writers write whole
// messages).
func (r *Redactor) Writer(w io.Writer) io.Writer { return &redactingWriter{r: r, w: w} }

type redactingWriter struct {
	r *Redactor
	w io.Writer
}

func (w *redactingWriter) Write(p []byte) (int, error) {
	s := w.r.Redact(string(p))
	if _, err := io.WriteString(w.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
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
