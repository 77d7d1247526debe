package configs_test

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/docketq/docket/configs"
	"github.com/stretchr/testify/require"
)

// TestDashboardSettings: the dashboard's settings come from the file, the
// environment and flags, in that precedence; --dashboard-host repeats;
// only `docketctl dashboard` has them.
func TestDashboardSettings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "docket.yaml")
	require.NoError(t, os.WriteFile(path, []byte("dashboard:\n  hosts: [file.example]\n  tlsCert: /file/cert.pem\n  tlsKey: /file/key.pem\n"), 0o600))
	load := func(role string, env map[string]string, args ...string) (configs.Config, error) {
		fs := flag.NewFlagSet(role, flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		return configs.Load(fs, role, append([]string{"--config", path}, args...), func(k string) string { return env[k] })
	}
	c, err := load(configs.DashboardRole, nil)
	require.NoError(t, err)
	require.Equal(t, configs.DashboardConfig{Hosts: []string{"file.example"}, TLSCert: "/file/cert.pem", TLSKey: "/file/key.pem"}, c.Dashboard)

	env := map[string]string{"DOCKET_DASHBOARD_HOSTS": "a.example, b.example", "DOCKET_DASHBOARD_PLAIN_HTTP": "true", "DOCKET_DASHBOARD_TLS_KEY": "/env/key.pem"}
	c, err = load(configs.DashboardRole, env)
	require.NoError(t, err)
	require.Equal(t, configs.DashboardConfig{Hosts: []string{"a.example", "b.example"}, TLSCert: "/file/cert.pem", TLSKey: "/env/key.pem", PlainHTTP: true}, c.Dashboard)

	c, err = load(configs.DashboardRole, env, "--dashboard-host", "c.example", "--dashboard-host", "d.example,e.example", "--plain-http=false", "--tls-cert", "/flag/cert.pem")
	require.NoError(t, err)
	require.Equal(t, configs.DashboardConfig{Hosts: []string{"c.example", "d.example", "e.example"}, TLSCert: "/flag/cert.pem", TLSKey: "/env/key.pem"}, c.Dashboard)

	_, err = load(configs.DashboardRole, map[string]string{"DOCKET_DASHBOARD_PLAIN_HTTP": "maybe"})
	require.ErrorContains(t, err, `DOCKET_DASHBOARD_PLAIN_HTTP (dashboard.plainHTTP): "maybe": not true or false`)
	_, err = load(configs.DashboardRole, map[string]string{"DOCKET_DASHBOARD_HOSTS": " , "})
	require.ErrorContains(t, err, "needs at least one host name")
	_, err = load("docketctl list", nil, "--plain-http")
	require.ErrorContains(t, err, "flag provided but not defined: -plain-http")
}
