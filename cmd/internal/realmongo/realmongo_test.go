package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// TestCheckRefusesAStandaloneDevDB: devdb speaks MongoDB's protocol but is
// a standalone server: the check says what it is and refuses it, naming
// the way out; with --allow-standalone it accepts it, says there are no
// retryable writes, and creates and drops a database of its own.
func TestCheckRefusesAStandaloneDevDB(t *testing.T) {
	testdb.SkipOnRealMongo(t, "checks the check against a devdb of its own")
	t.Parallel()
	ctx := context.Background()
	d := testdb.StartDevDB(t, "")

	var out bytes.Buffer
	err := check(ctx, d.URI(), false, &out)
	require.ErrorContains(t, err, "is not a replica set")
	require.ErrorContains(t, err, "--allow-standalone")
	require.Contains(t, out.String(), "is FerretDB")
	require.Contains(t, out.String(), "a standalone server")
	require.NotContains(t, out.String(), "database created", "refused before the probe")

	out.Reset()
	require.NoError(t, check(ctx, d.URI(), true, &out))
	require.Contains(t, out.String(), "running anyway (--allow-standalone)")
	require.Contains(t, out.String(), "retryable writes: none")
	require.Contains(t, out.String(), "a database created with a majority write and dropped: ok")

	c, err := mongo.Connect(options.Client().ApplyURI(d.URI()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	names, err := c.ListDatabaseNames(ctx, bson.D{})
	require.NoError(t, err)
	for _, n := range names {
		require.False(t, strings.HasPrefix(n, "docket_test_mongo_"), "the probe's database %s is left", n)
	}
}

// TestCheckSaysWhenNoServerAnswers: a port nobody listens on is reported
// as not answering, within the check's deadline.
func TestCheckSaysWhenNoServerAnswers(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err = check(ctx, "mongodb://"+addr+"/", false, &bytes.Buffer{})
	require.ErrorContains(t, err, "mongodb://"+addr+"/ does not answer")
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ uri, want string }{
		{"mongodb://localhost:27017/?replicaSet=rs0", "mongodb://localhost:27017/?replicaSet=rs0"},
		{"mongodb://u:p%40ss@h1:1,h2:2/db?replicaSet=rs", "mongodb://***@h1:1,h2:2/db?replicaSet=rs"},
		{"mongodb+srv://user:secret@cluster.example.net/", "mongodb+srv://***@cluster.example.net/"},
		{"mongodb://h/?tls=true&tlsCertificateKeyFilePassword=hush&w=1", "mongodb://h/?tls=true&tlsCertificateKeyFilePassword=***&w=1"},
		// Passwords the driver refuses, quoted in the error that says so.
		{"mongodb://u:pa/ss@h/", "mongodb://***@h/"},
		{"mongodb://u:p@ss@h/", "mongodb://***@h/"},
		{"MongoDB://u:secret@h/", "MongoDB://***@h/"},
	} {
		require.Equal(t, tc.want, redact(tc.uri))
	}
}

// runScript runs scripts/test-mongo.sh with args and returns its stdout,
// stderr and exit status.
func runScript(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errs bytes.Buffer
	cmd := exec.Command("bash", append([]string{filepath.Join("..", "..", "..", "scripts", "test-mongo.sh")}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errs
	cmd.Env = append(os.Environ(), testdb.EnvMongoURI+"=") // the script sets it itself
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out.String(), errs.String(), exit.ExitCode()
	}
	require.NoError(t, err)
	return out.String(), errs.String(), 0
}

// TestScriptRefusesBadArguments: no URI, a string that is not a MongoDB
// URI, an unknown flag: exit status 2 and the usage line.
func TestScriptRefusesBadArguments(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		says string
	}{
		{nil, "no URI given"},
		{[]string{"--allow-standalone"}, "no URI given"},
		{[]string{"localhost:27017"}, "localhost:27017 is not a MongoDB connection string"},
		{[]string{"MongoDB://u:hush@h/"}, "MongoDB://***@h/ is not a MongoDB connection string"},
		{[]string{"--retry", "mongodb://h/"}, "unknown flag --retry"},
	} {
		out, errs, code := runScript(t, tc.args...)
		require.Equal(t, 2, code, "%v: %s%s", tc.args, out, errs)
		require.Contains(t, errs, tc.says, tc.args)
		require.Contains(t, errs, "usage: scripts/test-mongo.sh", tc.args)
		require.Empty(t, out, tc.args)
		require.NotContains(t, errs, "hush", "a refused URI's password is not shown")
	}
}

// TestScriptOnDevDB runs scripts/test-mongo.sh against a devdb: refused
// (not a replica set) before any test runs; with --allow-standalone it runs
// the tests it is given against that server, with DOCKET_TEST_MONGO_URI
// set, so a devdb-only test skips, and the skip is listed with its reason.
func TestScriptOnDevDB(t *testing.T) {
	testdb.SkipOnRealMongo(t, "runs the script against a devdb of its own")
	if testing.Short() {
		t.Skip("builds and runs a package's tests under the race detector")
	}
	t.Parallel()
	d := testdb.StartDevDB(t, "")

	out, errs, code := runScript(t, d.URI())
	require.Equal(t, 1, code, "%s%s", out, errs)
	require.Contains(t, errs, "test-mongo: "+d.URI()+" is not a replica set")
	require.Contains(t, out, "is FerretDB")
	require.NotContains(t, out, "skipped", "no test ran")

	out, errs, code = runScript(t, "--allow-standalone", d.URI(), "-count=1",
		"-run", "^(TestStartDevDBKeepsDataAcrossRestarts|TestNewDBGivesIsolatedDatabases)$", "./internal/testdb/")
	t.Logf("the script's output:\n%s%s", out, errs)
	require.Equal(t, 0, code)
	require.Contains(t, out, "running anyway (--allow-standalone)")
	require.Regexp(t, `(?m)^ok  \tgithub.com/docketq/docket/internal/testdb\t`, out)
	require.Contains(t, out, "test-mongo: 1 test skipped on this server:\n")
	require.Regexp(t, `(?m)^  internal/testdb TestStartDevDBKeepsDataAcrossRestarts: testdb_test.go:\d+: devdb only, skipped with DOCKET_TEST_MONGO_URI set: stops, kills and restarts a devdb of its own$`, out)
	require.True(t, strings.HasSuffix(out, "test-mongo: ok\n"), out)

	// go test's own failure (here: no such package) fails the script.
	out, errs, code = runScript(t, "--allow-standalone", d.URI(), "./internal/nosuchpackage/")
	require.Equal(t, 1, code, "%s%s", out, errs)
	require.Contains(t, errs, "test-mongo: FAIL (go test exited 1)")
	require.NotContains(t, out, "test-mongo: ok")
}

// testModule writes a module with a package whose tests pass and skip (a)
// and one whose test fails (b), and returns its directory.
func testModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/m\n\ngo 1.24\n",
		"a/a_test.go": `package a
import "testing"
func TestPasses(t *testing.T) { t.Log("quiet") }
func TestSkips(t *testing.T) { t.Skip("needs what this server lacks") }
func TestSub(t *testing.T) { t.Run("inner", func(t *testing.T) { t.Skipf("inner %d", 7) }) }
`,
		"b/b_test.go": `package b
import "testing"
func TestFails(t *testing.T) { t.Log("before"); t.Fatal("broken promise") }
`,
	}
	for name, body := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	return dir
}

// goTestJSON runs go test -json on pkgs in dir and returns its output.
func goTestJSON(t *testing.T, dir string, pkgs ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", append([]string{"test", "-count=1", "-json"}, pkgs...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, _ := cmd.Output() // fails when b's test does: the report says so
	require.Contains(t, string(out), `"Action":"start"`)
	return out
}

// TestReportOfARealRun: the report of a real go test -json run prints the
// package lines and a failing test's output as go test would, lists every
// skipped test with its message, and says whether anything failed.
func TestReportOfARealRun(t *testing.T) {
	t.Parallel()
	dir := testModule(t)

	var out bytes.Buffer
	failed, err := report(bytes.NewReader(goTestJSON(t, dir, "./...")), &out, "")
	require.NoError(t, err)
	require.True(t, failed)
	s := out.String()
	require.Regexp(t, `(?m)^ok  \texample.com/m/a\t`, s)
	require.Regexp(t, `(?m)^--- FAIL: TestFails \(`, s)
	require.Contains(t, s, "b_test.go:3: before\n")
	require.Contains(t, s, "b_test.go:3: broken promise\n")
	require.Regexp(t, `(?m)^FAIL\texample.com/m/b\t`, s)
	require.NotContains(t, s, "=== RUN")
	require.NotContains(t, s, "quiet", "a passing test's output is not shown")
	require.Contains(t, s, "test-mongo: 2 tests skipped on this server:\n"+
		"  example.com/m/a TestSkips: a_test.go:4: needs what this server lacks\n"+
		"  example.com/m/a TestSub/inner: a_test.go:5: inner 7\n")

	out.Reset()
	failed, err = report(bytes.NewReader(goTestJSON(t, dir, "./a/")), &out, "")
	require.NoError(t, err)
	require.False(t, failed)
	require.NotContains(t, out.String(), "FAIL")
}

// TestCheckHidesARefusedPassword: a URI whose password the driver refuses
// is named redacted, and no fragment of the password the driver's error
// quotes is shown.
func TestCheckHidesARefusedPassword(t *testing.T) {
	t.Parallel()
	err := check(context.Background(), "mongodb://u:ab%zzcd@h/", false, &bytes.Buffer{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "mongodb://***@h/")
	require.NotContains(t, err.Error(), "%zz")
}

// TestReportHidesThePassword: a failing test's output, a skipped test's
// message and a build's output that quote the server's URI, or its password
// alone, are shown with the password hidden.
func TestReportHidesThePassword(t *testing.T) {
	t.Parallel()
	const uri = "mongodb://u:s3cr%40t@h1:1/?replicaSet=rs&tlsCertificateKeyFilePassword=hush"
	in := strings.Join([]string{
		`{"Action":"build-output","ImportPath":"p","Output":"vet: ` + uri + `\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"a_test.go:1: connect ` + uri + `\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"a_test.go:2: password s3cr@t\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"b_test.go:1: skipped on ` + uri + `\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestB"}`,
		`not json ` + uri,
	}, "\n")
	var out bytes.Buffer
	failed, err := report(strings.NewReader(in), &out, uri)
	require.NoError(t, err)
	require.True(t, failed)
	s := out.String()
	require.Contains(t, s, "a_test.go:1: connect mongodb://***@h1:1/")
	require.Contains(t, s, "b_test.go:1: skipped on mongodb://***@h1:1/")
	for _, secret := range []string{"s3cr", "hush"} {
		require.NotContains(t, s, secret)
	}
}
