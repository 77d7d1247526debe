package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
)

// TestUglyPasswordsNeverShown runs the real worker and enqueue binaries with
// URIs whose passwords hold the characters a URI gives meaning to, unescaped
// as users paste them (a base64 password holds '/'), and checks that no
// password reaches --help, a configuration error or a connection error.
// No server is needed: the URIs point at a closed port or do not parse.
func TestUglyPasswordsNeverShown(t *testing.T) {
	t.Parallel()
	worker := testdb.BuildBinary(t, "github.com/docketq/docket/cmd/worker", true)
	enqueue := enqueueBinary(t)
	for _, tc := range []struct {
		name, pw string
		common   bool // also ordinary text: only its place in the URI is checked
	}{
		{name: "slash", pw: "sec/ret"},
		{name: "base64", pw: "Zm9vL2Jhcg+/cXV4==/Yg"},
		{name: "at", pw: "p@ssw0rd"},
		{name: "colon", pw: "pass:word"},
		{name: "bad escape", pw: "50%zzoff"},
		{name: "question", pw: "what?now"},
		{name: "hash", pw: "num#ber1"},
		{name: "all of them", pw: "p/@:%?#w"},
		{name: "unicode", pw: "pässwörd🔑"},
		{name: "long", pw: strings.Repeat("Ab/9@x:%?#", 200)},
		{name: "common word", pw: "mongodb", common: true},
		{name: "host name", pw: "127.0.0.1", common: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uri := "mongodb://docket:" + tc.pw + "@127.0.0.1:1/?authSource=admin"
			env := []string{"DOCKET_MONGO_URI=" + uri, "DOCKET_MONGO_TIMEOUT=300ms", "DOCKET_DB=pwtest"}
			check := func(what, out string) {
				t.Helper()
				require.NotEmpty(t, out, what)
				if tc.common {
					require.NotContains(t, out, "docket:"+tc.pw+"@", what)
					return
				}
				require.NotContains(t, out, tc.pw, "%s:\n%s", what, out)
				if len(tc.pw) > 12 {
					require.NotContains(t, out, tc.pw[:12], "%s:\n%s", what, out)
				}
			}

			out, code := runPlain(t, worker, env, "--help")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "docket:xxxxx@127.0.0.1:1")
			check("worker --help", out)

			out, code = runPlain(t, enqueue, env, "job", "--help")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "docket:xxxxx@127.0.0.1:1")
			check("enqueue job --help", out)

			// a configuration error after the URI is read
			out, code = runPlain(t, worker, append(env, "DOCKET_MONGO_TIMEOUT=-1s"))
			require.Equal(t, 2, code, out)
			check("worker config error", out)

			// the URI refused by docket or the driver, or a server that
			// does not answer
			out, code = runPlain(t, enqueue, env, "job", "--kind", "k")
			require.NotEqual(t, 0, code, out)
			require.True(t, strings.Contains(out, "mongo.uri") || strings.Contains(out, "docket:xxxxx@127.0.0.1:1"), out)
			check("enqueue error", out)
		})
	}
}

// runPlain runs bin with env added to the environment, without a database,
// and returns its combined output and exit code.
func runPlain(t *testing.T, bin string, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("run %s: %v", bin, err)
	}
	return out.String(), cmd.ProcessState.ExitCode()
}
