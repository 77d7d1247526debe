package configs_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/docketq/docket/configs"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// TestLogLinesHoldNoControls: a value another program stored (a job id,
// a kind, an error) reaches a log line with every control character but
// a tab and a newline escaped, in both formats: zap escapes C0 only
// inside JSON strings, and leaves DEL and the C1 controls (U+009B acts as
// ESC [ on a terminal) raw. A JSON line still reads back the same values.
func TestLogLinesHoldNoControls(t *testing.T) {
	hostile := "job\x1b[31m\x7f\u009b\u0085\r\x00-é✓"
	for _, format := range []string{"json", "console"} {
		var out bytes.Buffer
		log, err := configs.LogConfig{Level: "info", Format: format}.NewLogger(&out)
		require.NoError(t, err)
		log.Info("claimed "+hostile, zap.String("job_id", hostile), zap.Error(errors.New(hostile)))
		line := strings.TrimSuffix(out.String(), "\n")
		for _, c := range []string{"\x1b", "\x7f", "\u009b", "\u0085", "\r", "\x00", "\n"} {
			require.NotContains(t, line, c, "%s: a raw %q", format, c)
		}
		require.Contains(t, line, "é✓", "%s: other characters as they are", format)
		if format == "json" {
			var got map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &got))
			require.Equal(t, hostile, got["job_id"])
			require.Equal(t, "claimed "+hostile, got["msg"])
		}
	}
}
