package configs_test

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/docketq/docket/configs"
	"github.com/stretchr/testify/require"
)

// shopApp is an embedding application's configuration with a bool, a
// list and nested sections.
type shopApp struct {
	Enabled bool
	Regions []string
	Mail    shopMail
	extra   []configs.Setting
}

type shopMail struct {
	Host  string
	Port  int
	Retry struct {
		Max     int           `yaml:"max"`
		Backoff time.Duration `yaml:"backoff"`
	}
	Tags map[string][]string
}

func (a *shopApp) Defaults()       {}
func (a *shopApp) Validate() error { return nil }
func (a *shopApp) Settings() []configs.Setting {
	return append([]configs.Setting{
		configs.BoolSetting("shop.enabled", "SHOP_ENABLED", "shop-enabled", "sell", &a.Enabled),
		configs.StringsSetting("shop.regions", "SHOP_REGIONS", "shop-regions", "regions served", &a.Regions),
		configs.FileSetting("shop.mail", "mail server", &a.Mail),
	}, a.extra...)
}

// loadShop loads yml, env and args as a worker embedding app does.
func loadShop(t *testing.T, yml string, env map[string]string, app *shopApp, args ...string) error {
	t.Helper()
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	args = append([]string{"--config", writeFile(t, yml)}, args...)
	_, err := configs.LoadApp(fs, "worker", args, func(k string) string { return env[k] }, app)
	return err
}

// An app's bool, list and nested settings load from the file, the
// environment and flags; a key its types do not have is refused with its
// line.
func TestAppSettingsOfAnyShape(t *testing.T) {
	yml := `shop:
  enabled: true
  regions: [eu, us]
  mail:
    host: smtp.example.com
    port: 587
    retry: {max: 3, backoff: 2s}
    tags: {eu: [a, b]}
`
	var app shopApp
	require.NoError(t, loadShop(t, yml, nil, &app))
	require.True(t, app.Enabled)
	require.Equal(t, []string{"eu", "us"}, app.Regions)
	require.Equal(t, "smtp.example.com", app.Mail.Host)
	require.Equal(t, 587, app.Mail.Port)
	require.Equal(t, 3, app.Mail.Retry.Max)
	require.Equal(t, 2*time.Second, app.Mail.Retry.Backoff)
	require.Equal(t, map[string][]string{"eu": {"a", "b"}}, app.Mail.Tags)

	app = shopApp{}
	require.NoError(t, loadShop(t, yml, map[string]string{"SHOP_REGIONS": "ap, eu"}, &app, "--shop-enabled=false"))
	require.False(t, app.Enabled)
	require.Equal(t, []string{"ap", "eu"}, app.Regions)
	app = shopApp{}
	require.NoError(t, loadShop(t, "", nil, &app, "--shop-enabled"))
	require.True(t, app.Enabled)

	for bad, want := range map[string]string{
		"shop:\n  mail:\n    hots: x\n":                  "line 3: field hots not found: hots is not a key of shop.mail",
		"shop:\n  mail:\n    retry: {max: 1, maxx: 2}\n": "line 3: field maxx not found: maxx is not a key of shop.mail.retry",
		"shop:\n  mail:\n    port: many\n":               "shop.mail",
		"shop:\n  enabled: maybe\n":                      "shop.enabled",
		"shop:\n  colour: red\n":                         "line 2: field colour not found: shop.colour is not a setting",
	} {
		require.ErrorContains(t, loadShop(t, bad, nil, &shopApp{}), want, bad)
	}
	require.ErrorContains(t, loadShop(t, "", map[string]string{"SHOP_ENABLED": "maybe"}, &shopApp{}), "SHOP_ENABLED (shop.enabled)")
}

// An app's setting that takes one of docket's keys, sections, variables or
// flags (or another of its own) is refused at load, named: the file's
// value would go to one of them only, and a flag named twice would panic.
func TestAppSettingsClashingWithDocketsAreRefused(t *testing.T) {
	var n int
	var d time.Duration
	var s string
	for _, tc := range []struct {
		extra configs.Setting
		want  string
	}{
		{configs.DurationSetting("worker.lease", "", "", "", &d), "the app's setting worker.lease is one of docket's keys"},
		{configs.StringSetting("mongo.uri", "", "", "", &s), "the app's setting mongo.uri"},
		{configs.IntSetting("capacities", "", "", "", &n), "the app's setting capacities"},
		{configs.StringSetting("worker", "", "", "", &s), "the app's setting worker is"},
		{configs.StringSetting("mongo.uri.user", "", "", "", &s), "the app's setting mongo.uri.user is under mongo.uri"},
		{configs.StringSetting("shop.mail.host", "", "", "", &s), "the app's setting shop.mail.host is under shop.mail"},
		{configs.DurationSetting("shop.lease", "DOCKET_LEASE", "", "", &d), "the app's setting shop.lease takes DOCKET_LEASE, already worker.lease's"},
		{configs.DurationSetting("shop.lease", "", "lease", "", &d), "the app's setting shop.lease takes --lease, already worker.lease's"},
		{configs.FileSetting("shop.other", "", s), "the app's setting shop.other: FileSetting needs a non-nil pointer, not string"},
	} {
		for _, yml := range []string{"worker:\n  lease: 50s\n", ""} {
			app := shopApp{extra: []configs.Setting{tc.extra}}
			require.ErrorContains(t, loadShop(t, yml, nil, &app), tc.want)
		}
	}
}

// writeFile writes yml to a file of its own and returns its path.
func writeFile(t *testing.T, yml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "docket.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yml), 0o600))
	return path
}
