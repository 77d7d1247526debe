package dashboard_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A minimal WebDriver client: enough of the W3C protocol to drive
// Debian's chromium through chromedriver (scripts/test-deps.sh installs
// both).

const elementKey = "element-6066-11e4-a52e-4f735466cecf"

type browser struct {
	t       *testing.T
	base    string // chromedriver's URL
	session string
	shots   string // where screenshots go
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startBrowser starts chromedriver and a headless chromium session, with
// args added to chromium's command line.
func startBrowser(t *testing.T, args ...string) *browser {
	t.Helper()
	driver, err := exec.LookPath("chromedriver")
	if err != nil {
		t.Fatalf("chromedriver not found: run scripts/test-deps.sh (it installs Debian's chromium and chromium-driver): %v", err)
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not found: run scripts/test-deps.sh: %v", err)
	}
	port := freePort(t)
	cmd := exec.Command(driver, fmt.Sprintf("--port=%d", port))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	b := &browser{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	require.Eventually(t, func() bool {
		resp, err := http.Get(b.base + "/status")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 20*time.Second, 50*time.Millisecond, "chromedriver did not start: %s", &out)
	var created struct {
		SessionID string `json:"sessionId"`
	}
	b.call("POST", "/session", map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{
			"binary": chromium,
			"args":   append([]string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000"}, args...),
		},
	}}}, &created)
	b.session = created.SessionID
	t.Cleanup(func() { b.call("DELETE", "/session/"+b.session, nil, nil) })
	b.shots = os.Getenv("DOCKET_SCREENSHOTS")
	if b.shots == "" {
		b.shots = filepath.Join(os.TempDir(), "docket-screenshots")
	}
	require.NoError(t, os.MkdirAll(b.shots, 0o755))
	return b
}

// call sends one WebDriver command and decodes its value into out.
func (b *browser) call(method, path string, body, out any) {
	b.t.Helper()
	status, raw := b.try(method, path, body)
	require.Equal(b.t, 200, status, "%s %s: %s", method, path, raw)
	if out != nil {
		var env struct {
			Value json.RawMessage `json:"value"`
		}
		require.NoError(b.t, json.Unmarshal(raw, &env))
		require.NoError(b.t, json.Unmarshal(env.Value, out))
	}
}

// try sends one WebDriver command and returns its status and body.
func (b *browser) try(method, path string, body any) (int, []byte) {
	b.t.Helper()
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		require.NoError(b.t, err)
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, b.base+path, rd)
	require.NoError(b.t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	return resp.StatusCode, raw
}

func (b *browser) open(url string) {
	b.t.Helper()
	b.call("POST", "/session/"+b.session+"/url", map[string]any{"url": url}, nil)
}

// find returns the element css selects, waiting for it to appear.
func (b *browser) find(css string) string {
	b.t.Helper()
	var id string
	require.Eventually(b.t, func() bool {
		var found []map[string]string
		b.call("POST", "/session/"+b.session+"/elements", map[string]any{"using": "css selector", "value": css}, &found)
		if len(found) == 0 {
			return false
		}
		id = found[0][elementKey]
		return id != ""
	}, 10*time.Second, 50*time.Millisecond, "no element %q on the page", css)
	return id
}

// text returns the text of the element css selects, read in one step: the
// page refreshes its content in place, so an element found earlier may be
// gone.
func (b *browser) text(css string) string {
	b.t.Helper()
	b.find(css)
	var s string
	b.call("POST", "/session/"+b.session+"/execute/sync", map[string]any{
		"script": "var e = document.querySelector(arguments[0]); return e ? e.innerText : '';", "args": []any{css},
	}, &s)
	return s
}

// click clicks the element css selects, finding it again if the page
// replaced it in between.
func (b *browser) click(css string) {
	b.t.Helper()
	for range 5 {
		status, raw := b.try("POST", "/session/"+b.session+"/element/"+b.find(css)+"/click", map[string]any{})
		if status == 200 {
			return
		}
		require.Contains(b.t, string(raw), "stale element", "click %s", css)
	}
	b.t.Fatalf("could not click %s: the page kept replacing it", css)
}

// script runs js in the page, with args as its arguments, and returns
// what it returns (a promise's value, once it settles).
func (b *browser) script(js string, args ...any) any {
	b.t.Helper()
	var v any
	if args == nil {
		args = []any{}
	}
	b.call("POST", "/session/"+b.session+"/execute/sync", map[string]any{"script": js, "args": args}, &v)
	return v
}

// screenshot saves the page as name.png and says where.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	var data string
	b.call("GET", "/session/"+b.session+"/screenshot", nil, &data)
	png, err := base64.StdEncoding.DecodeString(data)
	require.NoError(b.t, err)
	path := filepath.Join(b.shots, name+".png")
	require.NoError(b.t, os.WriteFile(path, png, 0o644))
	b.t.Logf("screenshot: %s", path)
}
