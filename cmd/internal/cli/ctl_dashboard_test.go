package cli

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docketq/docket/cmd/internal/dashboard"
	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// serveDashboard runs `docketctl dashboard args...` and returns the URL it
// prints, and stop, which stops it with SIGINT (as Ctrl-C). Stop each before
// starting another: a SIGINT reaches every one listening.
func serveDashboard(t *testing.T, db *mongo.Database, args ...string) (url string, stop func()) {
	t.Helper()
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	var errb strings.Builder
	go func() {
		args = append([]string{"dashboard", "--mongo-uri", testdb.URI(), "--db", db.Name(), "--mongo-timeout", "3s", "--log-format", "console"}, args...)
		done <- Ctl(args, strings.NewReader(""), pw, &errb)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err, "the dashboard did not start: %s", &errb)
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "dashboard: ")
	require.True(t, ok, line)
	return url, func() {
		t.Helper()
		require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
		select {
		case code := <-done:
			require.Zero(t, code, errb.String())
		case <-time.After(10 * time.Second):
			t.Fatal("the dashboard did not stop on SIGINT")
		}
	}
}

// TestDashboardCommandTrust: `docketctl dashboard` answers only the names
// it is served as (DOCKET_DASHBOARD_HOSTS adds one), serves HTTPS with
// --tls-cert and --tls-key, and refuses at start a public address over
// plain HTTP, a refresh past a day and a malformed host name, each saying
// why; the dashboard's settings are its own (`list` has none of them).
// Not parallel: it stops each dashboard with SIGINT, which no other test
// of the package may be listening for.
func TestDashboardCommandTrust(t *testing.T) {
	db := testdb.NewDB(t)
	t.Setenv(dashboard.PasswordEnv, "")
	t.Setenv("DOCKET_DASHBOARD_HOSTS", "dash.example, ops.example")

	for _, tc := range []struct {
		args []string
		says []string
	}{
		{[]string{"--addr", "0.0.0.0:0"}, []string{dashboard.PasswordEnv}},
		{[]string{"--refresh", "3000000"}, []string{"3000000 s is more than a day"}},
		{[]string{"--dashboard-host", "http://dash.example/"}, []string{"is not a host name"}},
		{[]string{"--tls-cert", "cert.pem"}, []string{"give both a TLS certificate"}},
	} {
		_, errs, code := runCtl(t, testdb.URI(), db, append([]string{"dashboard"}, tc.args...)...)
		require.Equal(t, 2, code, "%v: %s", tc.args, errs)
		for _, s := range tc.says {
			require.Contains(t, errs, s, tc.args)
		}
	}
	t.Setenv(dashboard.PasswordEnv, "pw")
	_, errs, code := runCtl(t, testdb.URI(), db, "dashboard", "--addr", "0.0.0.0:0")
	require.Equal(t, 2, code, errs)
	require.Contains(t, errs, "would cross the network in clear")
	require.Contains(t, errs, "--tls-cert")
	_, errs, code = runCtl(t, testdb.URI(), db, "list", "--dashboard-host", "dash.example")
	require.Equal(t, 2, code, errs)
	require.Contains(t, errs, "flag provided but not defined: -dashboard-host")
	t.Setenv(dashboard.PasswordEnv, "")

	get := func(client *http.Client, url, host string) int {
		t.Helper()
		req, err := http.NewRequest("GET", url+"workers", nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	url, stop := serveDashboard(t, db, "--addr", "127.0.0.1:0", "--refresh", "-1")
	require.True(t, strings.HasPrefix(url, "http://127.0.0.1:"), url)
	require.Equal(t, http.StatusMisdirectedRequest, get(http.DefaultClient, url, "evil.test"))
	require.Equal(t, http.StatusOK, get(http.DefaultClient, url, "ops.example"))
	require.Equal(t, http.StatusOK, get(http.DefaultClient, url, "localhost"))
	stop()
	url, stop = serveDashboard(t, db, "--addr", "127.0.0.1:0", "--dashboard-host", "a.example", "--dashboard-host", "b.example")
	require.Equal(t, http.StatusOK, get(http.DefaultClient, url, "a.example"))
	require.Equal(t, http.StatusOK, get(http.DefaultClient, url, "b.example"))
	require.Equal(t, http.StatusMisdirectedRequest, get(http.DefaultClient, url, "dash.example"), "the flag replaces the environment's list")
	stop()

	cert, key, pool := selfSignedFiles(t)
	url, stop = serveDashboard(t, db, "--addr", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key)
	require.True(t, strings.HasPrefix(url, "https://127.0.0.1:"), url)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	require.Equal(t, http.StatusOK, get(client, url, ""))
	stop()
}

// selfSignedFiles writes a certificate for 127.0.0.1 and its key.
func selfSignedFiles(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "docket test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
