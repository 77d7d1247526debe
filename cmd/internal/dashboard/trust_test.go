package dashboard_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/cmd/internal/dashboard"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// request sends method path to b's server as a request for host, with the
// form (a POST) and the basic-auth password pw when set.
func (b *bundle) request(t *testing.T, method, path, host string, form url.Values, pw string) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.srv.URL+path, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		// A page of the attacker's name sends its own origin: the same
		// as the Host, which is what the origin check compares.
		req.Header.Set("Origin", "http://"+host)
	}
	req.Host = host
	if pw != "" {
		req.SetBasicAuth("ops", pw)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(raw)
}

// TestForeignHostIsRefused: a request for a name the dashboard is not
// served as (DNS rebinding: an attacker's name resolved to 127.0.0.1) is
// refused on every route, before the password and the form token; the
// names it is served as are answered (issue 21 item 1).
func TestForeignHostIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Refresh: -1, Hosts: []string{"Dash.Example.com."}})
	port := b.srv.Listener.Addr().(*net.TCPAddr).Port
	evil := fmt.Sprintf("evil.test:%d", port)
	token := b.token(t)
	for _, path := range []string{"/", "/jobs", "/jobs?state=dead", "/jobs/" + b.ids["dead"], "/jobs/" + b.ids["done1"] + "/delete",
		"/workers", "/queues/pause?queue=mail", "/assets/style.css", "/no-such-page"} {
		code, body := b.request(t, "GET", path, evil, nil, "")
		require.Equal(t, http.StatusMisdirectedRequest, code, "GET %s: %s", path, body)
		require.Contains(t, body, `not served as "evil.test:`, path)
		require.Contains(t, body, "--dashboard-host")
		require.NotContains(t, body, "csrf", path)
		require.NotContains(t, body, "smtp", path)
	}
	for _, path := range []string{"/jobs/" + b.ids["done1"] + "/delete", "/jobs/" + b.ids["dead"] + "/retry", "/jobs/" + b.ids["waiting1"] + "/cancel"} {
		code, body := b.request(t, "POST", path, evil, url.Values{"csrf": {token}}, "")
		require.Equal(t, http.StatusMisdirectedRequest, code, "POST %s: %s", path, body)
	}
	code, body := b.request(t, "POST", "/queues/pause", evil, url.Values{"csrf": {token}, "queue": {"mail"}}, "")
	require.Equal(t, http.StatusMisdirectedRequest, code, body)
	require.Equal(t, jobs.StateSucceeded, b.state(t, "done1"))
	require.Equal(t, jobs.StateDead, b.state(t, "dead"))
	require.Equal(t, jobs.StateAvailable, b.state(t, "waiting1"))
	states, err := b.q.QueueStates(b.ctx)
	require.NoError(t, err)
	require.Empty(t, states, "no queue paused")

	for _, host := range []string{"localhost", fmt.Sprintf("localhost:%d", port), fmt.Sprintf("LocalHost.:%d", port),
		fmt.Sprintf("127.0.0.1:%d", port), "127.0.0.2", fmt.Sprintf("[::1]:%d", port), "dash.example.com", fmt.Sprintf("DASH.example.com:%d", port)} {
		code, body := b.request(t, "GET", "/", host, nil, "")
		require.Equal(t, http.StatusOK, code, "Host %s: %s", host, body)
	}
	for _, host := range []string{"evil.test", "localhost.evil.test", "127.0.0.1.evil.test", "example.com", "0.0.0.0", "10.0.0.1"} {
		code, _ := b.request(t, "GET", "/", host, nil, "")
		require.Equal(t, http.StatusMisdirectedRequest, code, "Host %q", host)
	}
	// Served as the token's own: the POST with a right Host goes through.
	code, body = b.request(t, "POST", "/jobs/"+b.ids["done1"]+"/delete", fmt.Sprintf("localhost:%d", port), url.Values{"csrf": {token}}, "")
	require.Equal(t, http.StatusOK, code, body)
}

// TestHostsAPasswordedDashboardIsServedAs: with a password, a foreign Host
// is refused even with the right password, and not asked for it; the
// listening address's own name is served, a wildcard's is not; an IP
// address is served when the request arrived at it (it cannot be rebound).
func TestHostsAPasswordedDashboardIsServedAs(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Addr: "dash.lan:8080", Password: "pw", PlainHTTP: true, Refresh: -1})
	code, body := b.request(t, "GET", "/", "evil.test:8080", nil, "pw")
	require.Equal(t, http.StatusMisdirectedRequest, code, body)
	code, _ = b.request(t, "GET", "/", "evil.test:8080", nil, "")
	require.Equal(t, http.StatusMisdirectedRequest, code, "no password prompt for a foreign name")
	code, body = b.request(t, "GET", "/", "dash.lan:8080", nil, "pw")
	require.Equal(t, http.StatusOK, code, body)

	srv, err := dashboard.New(b.db, b.q, dashboard.Config{Addr: "0.0.0.0:8080", Password: "pw", PlainHTTP: true})
	require.NoError(t, err)
	serve := func(host string, local net.IP) int {
		req := httptest.NewRequest("GET", "/workers", nil)
		req.Host = host
		req.SetBasicAuth("", "pw")
		if local != nil {
			req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: local, Port: 8080}))
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec.Code
	}
	require.Equal(t, http.StatusMisdirectedRequest, serve("0.0.0.0:8080", nil))
	require.Equal(t, http.StatusOK, serve("192.0.2.7:8080", net.ParseIP("192.0.2.7")), "the address the request arrived at")
	require.Equal(t, http.StatusMisdirectedRequest, serve("192.0.2.8:8080", net.ParseIP("192.0.2.7")))
	require.Equal(t, http.StatusMisdirectedRequest, serve("dash.lan:8080", net.ParseIP("192.0.2.7")), "a name needs --dashboard-host")

	for _, bad := range []string{"http://dash.lan", "dash.lan:8080", "dash.lan/x", " ", "a b"} {
		_, err := dashboard.New(b.db, b.q, dashboard.Config{Addr: "127.0.0.1:0", Hosts: []string{bad}})
		require.ErrorContains(t, err, "is not a host name", bad)
	}
}

// TestRefreshIsBounded: a refresh longer than a browser's timer holds made
// pages reload in a tight loop; it is refused at start. A negative one
// (off) puts no refresh on the page (its -1 s also looped).
func TestRefreshIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Refresh: -1})
	for _, path := range []string{"/", "/jobs", "/workers", "/jobs/" + b.ids["dead"]} {
		code, body := b.get(t, path)
		require.Equal(t, http.StatusOK, code)
		require.NotContains(t, body, "data-refresh", path)
		require.NotContains(t, body, "refreshes every", path)
	}
	_, err := dashboard.New(b.db, b.q, dashboard.Config{Addr: "127.0.0.1:0", Refresh: 3_000_000})
	require.ErrorContains(t, err, "refresh: 3000000 s is more than a day")
	_, err = dashboard.New(b.db, b.q, dashboard.Config{Addr: "127.0.0.1:0", Refresh: dashboard.MaxRefresh})
	require.NoError(t, err)
}

// TestWrongPasswordsAreThrottled: past a few wrong passwords a client
// waits, twice as long after each further one, right password or not (429
// with Retry-After); others are not held up; a right password resets the
// count; each wrong one is logged with the client and the user name
// escaped. Before, 300 guesses took 3.5 s.
func TestWrongPasswordsAreThrottled(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Refresh: -1})
	core, logs := observer.New(zapcore.InfoLevel)
	srv, err := dashboard.New(b.db, b.q, dashboard.Config{Addr: "0.0.0.0:8080", Password: "right", PlainHTTP: true, Refresh: -1, Logger: zap.New(core)})
	require.NoError(t, err)
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	srv.SetClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	try := func(client, pw string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/workers", nil)
		req.Host = "localhost"
		req.RemoteAddr = client
		if pw != "" {
			req.SetBasicAuth("ops\x1b[2J", pw)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec
	}
	const attacker, other = "192.0.2.1:4000", "192.0.2.2:4000"
	require.Equal(t, http.StatusUnauthorized, try(attacker, "").Code, "no password: asked for it, not counted")
	for i := range 5 {
		require.Equal(t, http.StatusUnauthorized, try(attacker, fmt.Sprint("guess", i)).Code, "guess %d", i)
	}
	for _, wait := range []int{1, 2, 4} {
		rec := try(attacker, "right")
		require.Equal(t, http.StatusTooManyRequests, rec.Code, "the right password waits too")
		require.Equal(t, fmt.Sprint(wait), rec.Header().Get("Retry-After"))
		require.Contains(t, rec.Body.String(), fmt.Sprintf("try again in %d s", wait))
		require.Equal(t, http.StatusOK, try(other, "right").Code, "another client is not held up")
		advance(time.Duration(wait) * time.Second)
		require.Equal(t, http.StatusUnauthorized, try(attacker, "wrong").Code)
	}
	require.Equal(t, http.StatusTooManyRequests, try("192.0.2.1:5000", "right").Code, "the same address from another port")
	advance(8 * time.Second)
	require.Equal(t, http.StatusOK, try(attacker, "right").Code)
	for range 5 {
		require.Equal(t, http.StatusUnauthorized, try(attacker, "wrong").Code, "the right password reset the count")
	}

	wrong := logs.FilterMessage("dashboard: wrong password").All()
	require.Len(t, wrong, 13)
	fields := wrong[0].ContextMap()
	require.Equal(t, `"192.0.2.1"`, fields["client"])
	require.Equal(t, `"ops\x1b[2J"`, fields["user"], "the user name is escaped")
	require.Len(t, logs.FilterMessage("dashboard: too many wrong passwords; refusing the client's attempts for a while").All(), 4,
		"each wait's first refusal is logged, once")
}

// TestTLSOffLoopback: off loopback the dashboard refuses plain HTTP unless
// told a TLS proxy is in front (and says why); given a certificate and
// key, it serves HTTPS, and the password crosses the network encrypted.
func TestTLSOffLoopback(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Refresh: -1})
	_, err := dashboard.New(b.db, b.q, dashboard.Config{Addr: "0.0.0.0:8080", Password: "pw"})
	require.ErrorContains(t, err, "would cross the network in clear")
	require.ErrorContains(t, err, "--tls-cert")
	require.ErrorContains(t, err, "--plain-http")
	_, err = dashboard.New(b.db, b.q, dashboard.Config{Addr: "10.0.0.5:8080", Password: "pw", PlainHTTP: true})
	require.NoError(t, err)

	certFile, keyFile, pool := selfSigned(t)
	_, err = dashboard.New(b.db, b.q, dashboard.Config{Addr: "0.0.0.0:8080", Password: "pw", TLSCert: certFile})
	require.ErrorContains(t, err, "give both a TLS certificate")
	_, err = dashboard.New(b.db, b.q, dashboard.Config{Addr: "0.0.0.0:8080", Password: "pw", TLSCert: certFile, TLSKey: certFile})
	require.ErrorContains(t, err, "TLS certificate")

	srv, err := dashboard.New(b.db, b.q, dashboard.Config{Addr: "0.0.0.0:0", Password: "pw", TLSCert: certFile, TLSKey: keyFile, Refresh: -1})
	require.NoError(t, err)
	require.NotNil(t, srv.TLSConfig())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = hs.Serve(tls.NewListener(ln, srv.TLSConfig())) }()
	t.Cleanup(func() { _ = hs.Close() })
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, err := http.NewRequest("GET", "https://"+ln.Addr().String()+"/workers", nil)
	require.NoError(t, err)
	req.SetBasicAuth("ops", "pw")
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = http.Get("http://" + ln.Addr().String() + "/workers")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP to the TLS port is refused")
}

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns
// their files and a pool that trusts it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "docket test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
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

// TestOverviewRowsAreBounded: 300 foreign kinds make at most
// DefaultOverviewRows rows, those with the most jobs, and the page says
// how many rows and jobs it left out (5,000 kinds made a 3.3 MB page,
// every 5 s per tab).
func TestOverviewRowsAreBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Refresh: -1})
	counts := map[string]map[jobs.State]int64{"big": {"available": 1000}}
	for i := range 300 {
		counts[fmt.Sprintf("foreign-%03d", i)] = map[jobs.State]int64{"dead": 1}
	}
	ok, err := b.q.StoreStats(b.ctx, queue.StoredStats{CountedAt: store.Of(b.q).ServerTime(b.ctx), By: "w1", Every: 15 * time.Second,
		Queues: []queue.QueueStats{{Queue: "zzz", Counts: counts}, {Queue: "mail", Counts: map[string]map[jobs.State]int64{"mail": {"available": 3}}}}})
	require.NoError(t, err)
	require.True(t, ok)
	code, body := b.get(t, "/")
	require.Equal(t, http.StatusOK, code)
	table := regexp.MustCompile(`(?s)<table id="queues">(.*?)</table>`).FindStringSubmatch(body)
	require.NotNil(t, table)
	rows := strings.Count(table[1], "<tr>") - 1
	require.Equal(t, dashboard.DefaultOverviewRows, rows)
	require.Contains(t, table[1], `kind=big">big</a>`, "the rows with the most jobs are kept")
	require.Contains(t, table[1], `kind=mail">mail</a>`)
	require.Contains(t, body, `id="left-out">and 102 more queue × kind rows (102 jobs)`)
	require.Equal(t, "1003", cardCount(t, body, "available"), "the totals count every row")
	require.Equal(t, "300", cardCount(t, body, "dead"))
}
