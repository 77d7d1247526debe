package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
	"unicode/utf8"
)

// printJSON writes b, one JSON value, and a newline to w. The JSON
// encoders leave DEL and the C1 controls (U+0080 to U+009F) raw in strings,
// and a terminal acts on them (U+009B starts an escape sequence as ESC [
// does): another app's document may hold them, so they are written as
// \u escapes, which read back as the same value.
func printJSON(w io.Writer, b []byte) error {
	out := make([]byte, 0, len(b)+1)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == 0x7f || (r >= 0x80 && r <= 0x9f) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, b[:size]...)
		}
		b = b[size:]
	}
	_, err := w.Write(append(out, '\n'))
	return err
}

// printIndentedJSON is printJSON of v, indented.
func printIndentedJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return printJSON(w, b)
}

// jsonTime is a time in JSON output as encoding/json writes a time.Time
// (RFC 3339 with nanoseconds), also for a year outside 0 to 9999, which
// time.Time refuses to marshal and another app's document may hold.
type jsonTime time.Time

// MarshalJSON writes t as a JSON string.
func (t jsonTime) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Time(t).Format(time.RFC3339Nano))
}

// UnmarshalJSON reads what MarshalJSON wrote of a time within years 0 to
// 9999.
func (t *jsonTime) UnmarshalJSON(b []byte) error {
	var tt time.Time
	err := tt.UnmarshalJSON(b)
	*t = jsonTime(tt)
	return err
}
