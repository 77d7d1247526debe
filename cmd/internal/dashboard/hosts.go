package dashboard

import (
	"fmt"
	"net"
	"net/http"
	"strings"
)

// DNS rebinding: a web page at http://evil.example:8080/ whose name then
// resolves to 127.0.0.1 is same-origin with a dashboard on 127.0.0.1:8080.
// Its scripts can read every page (the confirm page's form token
// included) and POST with an Origin that matches the Host, both the
// attacker's name. The browser always sends the name it resolved as the
// Host, so answering only the names the dashboard is served as ends it.

// hostNames returns the names the dashboard answers besides localhost and
// loopback addresses: Addr's host unless it is a wildcard, and hosts,
// checked and normalized.
func hostNames(addr string, hosts []string) (map[string]bool, error) {
	out := map[string]bool{}
	if h, _, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(h); h != "" && (ip == nil || !ip.IsUnspecified()) {
			out[normalHost(h)] = true
		}
	}
	for _, h := range hosts {
		n := normalHost(h)
		if n == "" || strings.ContainsAny(n, "/ \t@?#\\") || (strings.Contains(n, ":") && net.ParseIP(n) == nil) {
			return nil, fmt.Errorf("dashboard: host %q is not a host name or an IP address (give it without a scheme, a port or a path, such as dashboard.example.com)", h)
		}
		out[n] = true
	}
	return out, nil
}

// normalHost is a host as requests name it: lower case, without brackets
// or a trailing dot.
func normalHost(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(h, ".")
}

// servedAs reports whether r is for a name the dashboard is served as:
// localhost, a loopback address, the address r arrived at (an IP address
// cannot be rebound), Addr's host, or a configured name.
func (s *Server) servedAs(r *http.Request) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = normalHost(host)
	if host == "" {
		return false
	}
	if host == "localhost" || s.hosts[host] {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	return ok && local.IP.Equal(ip)
}
