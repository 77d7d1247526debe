package configs

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// DashboardRole is the role of `docketctl dashboard` for Load: the
// commands' settings and DashboardConfig's.
const DashboardRole = "docketctl dashboard"

// DashboardConfig configures `docketctl dashboard` beyond its --addr and
// --refresh flags: what it trusts. Every field defaults to its zero value.
type DashboardConfig struct {
	// Hosts are the names, beside localhost, loopback addresses and the
	// listening address's own, that the dashboard is reached by (the Host
	// of a request): a name a proxy or DNS gives it. A request for any
	// other name is refused, whatever its password, so a web page whose
	// name rebinds to the dashboard's address cannot read or drive it.
	// Defaults to none.
	Hosts []string
	// TLSCert and TLSKey are the PEM files of the certificate and key the
	// dashboard serves HTTPS with. Defaults to none: plain HTTP, which only
	// a loopback address or PlainHTTP allows.
	TLSCert string
	TLSKey  string
	// PlainHTTP serves plain HTTP on an address other than loopback, where
	// the password crosses the network in clear: set it only behind a
	// proxy that terminates TLS. Defaults to false.
	PlainHTTP bool
}

// settings are the dashboard's environment variables and flags.
func (d *DashboardConfig) settings() []Setting {
	return []Setting{
		{"dashboard.hosts", "DOCKET_DASHBOARD_HOSTS", "dashboard-host", "a name the dashboard is reached by, beside localhost and loopback addresses (repeat the flag, or comma-separate); requests for other names are refused", &hostsValue{p: &d.Hosts}},
		{"dashboard.tlsCert", "DOCKET_DASHBOARD_TLS_CERT", "tls-cert", "PEM certificate file to serve HTTPS with (with --tls-key)", (*stringValue)(&d.TLSCert)},
		{"dashboard.tlsKey", "DOCKET_DASHBOARD_TLS_KEY", "tls-key", "PEM key file of --tls-cert", (*stringValue)(&d.TLSKey)},
		{"dashboard.plainHTTP", "DOCKET_DASHBOARD_PLAIN_HTTP", "plain-http", "serve plain HTTP on an address other than loopback, where the password crosses the network in clear (behind a TLS proxy only)", (*boolValue)(&d.PlainHTTP)},
	}
}

// hostsValue is a list of host names: the environment's comma-separated
// list, or the flag's, repeated; the first flag replaces what the file and
// the environment said, later ones add to it.
type hostsValue struct {
	p       *[]string
	flagged bool
}

func (v *hostsValue) String() string {
	if v.p == nil {
		return ""
	}
	return strings.Join(*v.p, ",")
}

func (v *hostsValue) Set(s string) error {
	var names []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("needs at least one host name")
	}
	if !v.flagged {
		*v.p = nil
		v.flagged = true
	}
	*v.p = append(*v.p, names...)
	return nil
}

func (v *hostsValue) decodeYAML(n *yaml.Node) error { return n.Decode(v.p) }

type boolValue bool

func (v *boolValue) decodeYAML(n *yaml.Node) error { return n.Decode((*bool)(v)) }

func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }
func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("not true or false")
	}
	*v = boolValue(b)
	return nil
}
