package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
)

// TestTimeLimitReplyIsNotSilence: a command the server refuses with
// MaxTimeMSExpired (code 50, which the driver wraps as a deadline) is
// reported as the server's answer, not as a server that "did not answer".
func TestTimeLimitReplyIsNotSilence(t *testing.T) {
	testdb.SkipOnRealMongo(t, "injects a reply with a devdb of its own")
	t.Setenv(testdb.EnvDevDBFlags, "--faults timelimit=1 --seed 1")
	srv := testdb.StartDevDB(t, "")
	var stdout, stderr bytes.Buffer
	code := Enqueue([]string{"job", "--mongo-uri", srv.URI(), "--db", "tl", "--mongo-timeout", "3s", "--kind", "noop"},
		strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, 1, code, stderr.String())
	require.Contains(t, stderr.String(), "answered that a command ran past its time limit")
	require.NotContains(t, stderr.String(), "did not answer")
}
