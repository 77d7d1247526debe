package configs_test

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/docketq/docket/configs"
	"github.com/stretchr/testify/require"
)

// uglyPassword is a password as a user pastes it into a URI, unescaped.
type uglyPassword struct {
	name string
	pw   string
	// common is true when the password is also ordinary text of the URI or
	// of messages (a scheme word, the host name): it cannot be checked for
	// absence, only for its place in the URI being redacted.
	common bool
}

// uglyPasswords is the corpus every redaction test runs over: the
// characters a URI gives meaning to, unescaped, and a few awkward shapes.
var uglyPasswords = []uglyPassword{
	{name: "slash", pw: "sec/ret"},
	{name: "base64", pw: "Zm9vL2Jhcg+/cXV4==/Yg"},
	{name: "at", pw: "p@ssw0rd"},
	{name: "colon", pw: "pass:word"},
	{name: "percent bad escape", pw: "50%zzoff"},
	{name: "percent trailing", pw: "100pct%"},
	{name: "percent encoded at", pw: "s3cr%40tPW"},
	{name: "question", pw: "what?now"},
	{name: "hash", pw: "num#ber1"},
	{name: "all of them", pw: "p/@:%?#w"},
	{name: "quote and backslash", pw: `qu"ote\bs`},
	{name: "unicode", pw: "pässwörd🔑"},
	{name: "space", pw: "two words"},
	{name: "very long", pw: strings.Repeat("Ab/9@x:%?#", 3000)},
	{name: "common word", pw: "mongodb", common: true},
	{name: "host name", pw: "db1.example.net", common: true},
}

// uglyURIs returns the URIs a password is tried in, with the redacted form
// each must take.
func uglyURIs(pw string) map[string]string {
	out := map[string]string{}
	for _, shape := range []string{
		"mongodb://docket:%s@db1.example.net:27017,db2.example.net:27017/?replicaSet=rs0&authSource=admin",
		"mongodb+srv://docket:%s@db1.example.net/jobsdb?tls=true",
		"mongodb://docket:%s@db1.example.net",
		"mongo://docket:%s@db1.example.net/", // misspelt scheme
		"docket:%s@db1.example.net:27017",    // no scheme at all
	} {
		out[strings.Replace(shape, "%s", pw, 1)] = strings.Replace(shape, "%s", "xxxxx", 1)
	}
	return out
}

func TestRedactURIUglyPasswords(t *testing.T) {
	for _, tc := range uglyPasswords {
		t.Run(tc.name, func(t *testing.T) {
			for uri, want := range uglyURIs(tc.pw) {
				got := configs.RedactURI(uri)
				require.Equal(t, want, got, "RedactURI(%.200q)", uri)
			}
		})
	}
}

func TestRedactURIWithoutPassword(t *testing.T) {
	for _, uri := range []string{
		"mongodb://127.0.0.1:27017",
		"mongodb://docket:@db1:27017/", // empty password
		"mongodb://docket@db1:27017/",  // user, no password
		"mongodb://db1:27017/?w=majority",
		"",
	} {
		require.Equal(t, uri, configs.RedactURI(uri))
		require.Equal(t, "error at db1:27017", configs.Redact("error at db1:27017", uri))
	}
}

// TestRedactMessagesUglyPasswords: a message quoting the URI, the password
// as written, the password decoded or Go-quoted, or the fragment the driver
// names as malformed, shows none of them.
func TestRedactMessagesUglyPasswords(t *testing.T) {
	for _, tc := range uglyPasswords {
		t.Run(tc.name, func(t *testing.T) {
			for uri, want := range uglyURIs(tc.pw) {
				msg := configs.Redact("connect to "+uri+": auth failed", uri)
				require.Equal(t, "connect to "+want+": auth failed", msg)
				if tc.common {
					continue
				}
				for _, s := range []string{
					"password " + tc.pw + " refused",
					"connect to " + uri + " with password " + tc.pw,
					`bad password "` + tc.pw + `"`,
					"quoted: " + strconv.Quote(tc.pw),
				} {
					got := configs.Redact(s, uri)
					require.NotContains(t, got, tc.pw, "Redact(%.200q)", s)
					require.Contains(t, got, "xxxxx")
				}
			}
		})
	}
	// what the driver says about such URIs, with the fragment it quotes
	uri := "mongodb://u:a%zz/b@h/"
	require.Equal(t, `error parsing uri: invalid password: invalid URL escape "xxxxx"`,
		configs.Redact(`error parsing uri: invalid password: invalid URL escape "%zz"`, uri))
	uri = "mongodb://u:a@b:c/d@h/"
	require.Equal(t, `invalid host "xxxxx": bad port`, configs.Redact(`invalid host "b:c": bad port`, uri))
	require.Equal(t, `invalid host "h": bad port`, configs.Redact(`invalid host "h": bad port`, uri), "a one-letter quote is left alone")
}

// TestRedactCommonWordPassword: a password that is also ordinary text is
// hidden wherever it is the password, and the copies of the URI in a
// message keep their host.
func TestRedactCommonWordPassword(t *testing.T) {
	uri := "mongodb://docket:mongodb@mongodb.internal:27017/"
	require.Equal(t, "mongodb://docket:xxxxx@mongodb.internal:27017/", configs.RedactURI(uri))
	require.Equal(t, "connect to mongodb://docket:xxxxx@mongodb.internal:27017/: xxxxx auth failed",
		configs.Redact("connect to "+uri+": mongodb auth failed", uri))
	uri = "mongodb://docket:db1@db1:27017/"
	require.Equal(t, "mongodb://docket:xxxxx@db1:27017/", configs.RedactURI(uri))
}

// TestLoadErrorsUglyPasswords: whatever is wrong with the URI, the error
// Load returns names mongo.uri and shows no password.
func TestLoadErrorsUglyPasswords(t *testing.T) {
	for _, tc := range uglyPasswords {
		t.Run(tc.name, func(t *testing.T) {
			for uri, want := range uglyURIs(tc.pw) {
				for _, env := range []map[string]string{
					{"DOCKET_MONGO_URI": uri, "DOCKET_MONGO_TIMEOUT": "-1s"}, // an error after the URI is read
					{"DOCKET_MONGO_URI": uri, "DOCKET_DB": "a.b"},
				} {
					_, err := load(t, env)
					require.Error(t, err)
					checkHidden(t, tc, err.Error())
				}
				_, err := load(t, map[string]string{"DOCKET_MONGO_URI": uri})
				if err != nil {
					require.Contains(t, err.Error(), "mongo.uri")
					checkHidden(t, tc, err.Error())
					if tc.common {
						require.Contains(t, err.Error(), want)
					}
				}
			}
		})
	}
}

// TestLoadFileErrorsUglyPasswords: a config file that does not decode is
// reported without the password of the URI it holds.
func TestLoadFileErrorsUglyPasswords(t *testing.T) {
	for _, tc := range uglyPasswords {
		if tc.common {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "docket.yaml")
			// a URI where a duration belongs: YAML quotes the value
			body := "mongo:\n  timeout: 'docket:" + strings.ReplaceAll(tc.pw, "'", "''") + "@db1'\n"
			require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
			_, err := load(t, map[string]string{"DOCKET_CONFIG": path})
			require.Error(t, err)
			checkHidden(t, tc, err.Error())
		})
	}
}

// TestHelpUglyPasswords: --help shows the URI from the environment as the
// flag's default, redacted.
func TestHelpUglyPasswords(t *testing.T) {
	for _, tc := range uglyPasswords {
		t.Run(tc.name, func(t *testing.T) {
			for uri, want := range uglyURIs(tc.pw) {
				for _, role := range []string{"worker", "enqueue"} {
					var out bytes.Buffer
					fs := flag.NewFlagSet(role, flag.ContinueOnError)
					fs.SetOutput(&out)
					_, err := configs.Load(fs, role, []string{"--help"}, func(k string) string {
						if k == "DOCKET_MONGO_URI" {
							return uri
						}
						return ""
					})
					require.True(t, errors.Is(err, flag.ErrHelp), "%v", err)
					require.Contains(t, out.String(), "xxxxx")
					checkHidden(t, tc, out.String())
					if tc.common {
						require.Contains(t, out.String(), want)
					}
				}
			}
		})
	}
}

func checkHidden(t *testing.T, tc uglyPassword, out string) {
	t.Helper()
	if tc.common {
		require.NotContains(t, out, "docket:"+tc.pw+"@")
		return
	}
	require.NotContains(t, out, tc.pw)
	if len(tc.pw) > 12 {
		require.NotContains(t, out, tc.pw[:12])
	}
}

// TestRedactURIsInAnyText: every connection string in a message, whatever
// setting it was given to and however it is quoted, loses its password;
// text without one is left alone.
func TestRedactURIsInAnyText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`mongo.db: "mongodb://docket:S3cretPw@db1:27017/x" is not a valid database name`,
			`mongo.db: "mongodb://docket:xxxxx@db1:27017/x" is not a valid database name`},
		{`log.format: "MongoDB+SRV://u:p@ss/w0rd@db1/" must be "json"`, `log.format: "MongoDB+SRV://u:xxxxx@db1/" must be "json"`},
		{"a mongodb://u:pw1@h1 and mongodb://v:pw2@h2\nthen mongodb://h3:27017 and mongodb://w:pw3@h4",
			"a mongodb://u:xxxxx@h1 and mongodb://v:xxxxx@h2\nthen mongodb://h3:27017 and mongodb://w:xxxxx@h4"},
		{`quoted "mongodb://u:qu\"ote@h"`, `quoted "mongodb://u:xxxxx@h"`},
		{"mongodb://127.0.0.1:27017 is down", "mongodb://127.0.0.1:27017 is down"},
		{"mongodb://u@h: no password", "mongodb://u@h: no password"},
		{"mongodb://u:@h: empty password", "mongodb://u:@h: empty password"},
		{"user@example.com: not a URI", "user@example.com: not a URI"},
	} {
		require.Equal(t, tc.want, configs.RedactURIs(tc.in), tc.in)
	}
	r := configs.NewRedactor("mongodb://docket:S3cretPw@db1/")
	require.Equal(t, "db xxxxx.x, uri mongodb://docket:xxxxx@db1/", r.Redact("db S3cretPw.x, uri mongodb://docket:S3cretPw@db1/"))
	var out bytes.Buffer
	n, err := r.Writer(&out).Write([]byte("password S3cretPw\n"))
	require.NoError(t, err)
	require.Equal(t, len("password S3cretPw\n"), n)
	require.Equal(t, "password xxxxx\n", out.String())
	wrapped := r.Error(flag.ErrHelp)
	require.ErrorIs(t, wrapped, flag.ErrHelp)
}

// TestRedactTLSKeyFilePassword: the password of a TLS client key, given as
// a connection-string option, is hidden by every redaction as the user's
// password is, even in a URI without one.
func TestRedactTLSKeyFilePassword(t *testing.T) {
	const secret = "k3y-s3cret"
	uri := "mongodb://db.example/?tls=true&TLSCertificateKeyFilePassword=" + secret + "&appName=x"
	withUser := "mongodb://u:pw@db.example/?tlsCertificateKeyFilePassword=" + secret
	for name, got := range map[string]string{
		"RedactURI":          configs.RedactURI(uri),
		"RedactURI, user":    configs.RedactURI(withUser),
		"Redact":             configs.Redact("dial "+uri+": refused", uri),
		"RedactURIs":         configs.RedactURIs("error at " + withUser + "\nand " + uri),
		"Redactor":           configs.NewRedactor(uri).Redact("server " + uri + " not reachable"),
		"Redactor, in quote": configs.NewRedactor().Redact(`"` + uri + `"`),
	} {
		require.NotContains(t, got, secret, name)
		require.Contains(t, got, "xxxxx", name)
	}
	require.Equal(t, "mongodb://db.example/?tls=true&TLSCertificateKeyFilePassword=xxxxx&appName=x", configs.RedactURI(uri))
}

// TestRedactOtherQuerySecrets: the TLS key's password under the older name
// the driver also takes, and an AWS session token, are hidden as the
// password is.
func TestRedactOtherQuerySecrets(t *testing.T) {
	const secret = "s3cret-v4lue"
	for _, uri := range []string{
		"mongodb://db.example/?tls=true&sslClientCertificateKeyPassword=" + secret + "&appName=x",
		"mongodb://db.example/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:" + secret + ",SERVICE_NAME:x",
		// The driver percent-decodes option names and values, so these are
		// the same options.
		"mongodb://db.example/?tls=true&tlsCertificateKeyFile%50assword=" + secret,
		"mongodb://db.example/?tls=true&%74lsCertificateKeyFilePassword=" + secret + "&appName=x",
		"mongodb://db.example/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN%3a" + secret,
	} {
		for name, got := range map[string]string{
			"RedactURI":  configs.RedactURI(uri),
			"Redact":     configs.Redact("dial "+uri+": refused", uri),
			"RedactURIs": configs.RedactURIs("error at " + uri),
			"Redactor":   configs.NewRedactor(uri).Redact("server " + uri + " not reachable"),
		} {
			require.NotContains(t, got, secret, "%s: %s", name, uri)
			require.Contains(t, got, "xxxxx", name)
		}
	}
	require.Equal(t, "mongodb://db.example/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:xxxxx,SERVICE_NAME:x",
		configs.RedactURI("mongodb://db.example/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:"+secret+",SERVICE_NAME:x"))
}
