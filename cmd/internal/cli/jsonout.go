package cli

import (
	"encoding/json"
	"io"
	"time"

	"github.com/docketq/docket/internal/printable"
)

// printJSON writes b, one JSON value, and a newline to w, with DEL and
// the C1 controls, which JSON encoders leave raw and another app's
// document may hold, as \u escapes (printable.EscapeControls): they read
// back as the same value.
func printJSON(w io.Writer, b []byte) error {
	_, err := w.Write(append(printable.EscapeControls(nil, b), '\n'))
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
