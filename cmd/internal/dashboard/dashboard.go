// Package dashboard serves docket's web dashboard: an overview of the
// queues (paused ones, and how much of a bounded queue's capacity is
// taken), the jobs with filters and paging, each job
// with its attempts' errors, the worker processes alive, and the
// operator's actions (retry, cancel, delete a job; pause, resume a queue),
// each confirmed and reporting what it changed.
//
// Every page is rendered on the server from html/template, so whatever a
// job holds (args with "<script>", an error message) is shown as text, and
// every job id is a token in links (any id, of any type, names its job).
// The assets are embedded: nothing is fetched from elsewhere. The server
// answers only requests for the names it is served as (a page whose name
// rebinds to its address is refused); it listens on loopback unless a
// password is set, and then over TLS unless told it sits behind a TLS
// proxy; wrong passwords are throttled per client and logged; actions are
// POSTs carrying a token only the dashboard's own pages hold.
package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"

	"github.com/docketq/docket/queue"
)

//go:embed assets templates
var files embed.FS

// PasswordEnv is the environment variable docketctl dashboard reads the
// password from.
const PasswordEnv = "DOCKET_DASHBOARD_PASSWORD"

// requestTimeout bounds the database work of one page or action.
const requestTimeout = 10 * time.Second

// Defaults and bounds of Config.
const (
	// DefaultRefresh is how often pages refresh their content, in seconds.
	DefaultRefresh = 5
	// MaxRefresh is the longest refresh, in seconds (a day). A browser's
	// timer holds at most 2^31-1 ms (24.8 days) and fires at once past
	// it, which reloaded pages in a tight loop.
	MaxRefresh = 24 * 60 * 60
	// DefaultPageSize is how many jobs a page of the jobs list shows.
	DefaultPageSize = 50
	// DefaultOverviewRows bounds the overview's queue × kind rows: those
	// with the most jobs are shown, and the page says how many are not.
	DefaultOverviewRows = 200
)

// Config configures a Server.
type Config struct {
	// Addr is where the server listens: it decides whether a password and
	// TLS are required, and its host (unless a wildcard) is a name the
	// dashboard is served as.
	Addr string
	// Password, when set, is asked of every request (HTTP basic auth, any
	// user name). Required unless Addr is a loopback address.
	Password string
	// Hosts are the names, beside localhost, loopback addresses and Addr's
	// own host, that requests may name in their Host header; any other is
	// refused (421), password or not, so that a page whose DNS name
	// rebinds to this address cannot read or drive the dashboard. Defaults
	// to none.
	Hosts []string
	// TLSCert and TLSKey are PEM files: when set, TLSConfig serves HTTPS
	// with them. Off loopback, they (or PlainHTTP) are required.
	TLSCert, TLSKey string
	// PlainHTTP allows plain HTTP on an address other than loopback, for a
	// dashboard behind a proxy that terminates TLS. Defaults to false.
	PlainHTTP bool
	// Refresh is how often pages refresh their content, in seconds, at
	// most MaxRefresh. Defaults to DefaultRefresh; negative turns it off.
	Refresh int
	// PageSize is how many jobs a page lists. Defaults to DefaultPageSize.
	PageSize int
	// OverviewRows bounds the overview's queue × kind rows. Defaults to
	// DefaultOverviewRows.
	OverviewRows int
	// Redact removes credentials from an error message before it is shown
	// or logged. Defaults to the identity.
	Redact func(string) string
	// Logger receives the server's logs. Defaults to a no-op logger.
	Logger *zap.Logger
}

// Server is the dashboard.
type Server struct {
	cfg   Config
	db    *mongo.Database
	q     *queue.Client
	csrf  string
	pages map[string]*template.Template
	mux   *http.ServeMux
	log   *zap.Logger
	// hosts are the names requests may be for, beside localhost and
	// loopback addresses: lower case, without a trailing dot.
	hosts map[string]bool
	tls   *tls.Config
	// guesses throttles wrong passwords per client.
	guesses *throttle
}

// New returns the dashboard over the jobs of q in db. It refuses an Addr
// other than loopback without a password, and without TLS unless
// PlainHTTP says a proxy provides it.
func New(db *mongo.Database, q *queue.Client, cfg Config) (*Server, error) {
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Refresh > MaxRefresh {
		return nil, fmt.Errorf("dashboard: refresh: %d s is more than a day (%d s), longer than a browser's timer is meant to wait: give at most %d, or a negative number to turn refreshing off",
			cfg.Refresh, MaxRefresh, MaxRefresh)
	}
	if cfg.Refresh < 0 {
		cfg.Refresh = 0 // off: pages say nothing of refreshing (a negative one made the script refresh at once, in a loop)
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.OverviewRows <= 0 {
		cfg.OverviewRows = DefaultOverviewRows
	}
	if cfg.Redact == nil {
		cfg.Redact = func(s string) string { return s }
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if !isLoopback(cfg.Addr) && cfg.Password == "" {
		return nil, fmt.Errorf("dashboard: %q is not a loopback address: set %s to serve it there", cfg.Addr, PasswordEnv)
	}
	hosts, err := hostNames(cfg.Addr, cfg.Hosts)
	if err != nil {
		return nil, err
	}
	var tc *tls.Config
	switch {
	case (cfg.TLSCert == "") != (cfg.TLSKey == ""):
		return nil, errors.New("dashboard: give both a TLS certificate (--tls-cert, DOCKET_DASHBOARD_TLS_CERT) and its key (--tls-key, DOCKET_DASHBOARD_TLS_KEY), or neither")
	case cfg.TLSCert != "":
		pair, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("dashboard: TLS certificate %s and key %s: %w", cfg.TLSCert, cfg.TLSKey, err)
		}
		tc = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	case !isLoopback(cfg.Addr) && !cfg.PlainHTTP:
		return nil, fmt.Errorf("dashboard: %q is not a loopback address, and its password would cross the network in clear over plain HTTP: "+
			"give a TLS certificate and key (--tls-cert and --tls-key, DOCKET_DASHBOARD_TLS_CERT and DOCKET_DASHBOARD_TLS_KEY), "+
			"or serve it on loopback behind a proxy that terminates TLS; only behind such a proxy on another machine, set --plain-http (DOCKET_DASHBOARD_PLAIN_HTTP=true)", cfg.Addr)
	}
	token := make([]byte, 32)
	if _, err := rand.Read(token); err != nil {
		return nil, fmt.Errorf("dashboard: csrf token: %w", err)
	}
	s := &Server{cfg: cfg, db: db, q: q, csrf: hex.EncodeToString(token), pages: map[string]*template.Template{},
		mux: http.NewServeMux(), log: cfg.Logger.Named("dashboard"), hosts: hosts, tls: tc, guesses: newThrottle(time.Now)}
	for _, page := range []string{"overview", "jobs", "job", "confirm", "result", "error", "workers", "queueconfirm", "queueresult", "workflow"} {
		t, err := template.New(page).ParseFS(files, append([]string{"templates/base.html", "templates/progress.html", "templates/" + page + ".html"}, pageParts[page]...)...)
		if err != nil {
			return nil, fmt.Errorf("dashboard: template %s: %w", page, err)
		}
		s.pages[page] = t
	}
	assets, _ := fs.Sub(files, "assets")
	s.mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(assets)))
	s.mux.HandleFunc("GET /{$}", s.overview)
	s.mux.HandleFunc("GET /jobs", s.jobs)
	s.mux.HandleFunc("GET /jobs/{id}", s.job)
	s.mux.HandleFunc("GET /jobs/{id}/{action}", s.confirm)
	s.mux.HandleFunc("POST /jobs/{id}/{action}", s.act)
	s.mux.HandleFunc("GET /workers", s.workers)
	s.mux.HandleFunc("GET /workflows/{id}", s.workflow) // workflow.go
	s.mux.HandleFunc("GET /queues/{action}", s.queueConfirm)
	s.mux.HandleFunc("POST /queues/{action}", s.queueAct)
	return s, nil
}

// pageParts are the templates a page uses beside base.html and its own.
var pageParts = map[string][]string{"workflow": {"templates/workflowgraph.html"}}

// TLSConfig is what to serve HTTPS with (wrap the listener with
// tls.NewListener); nil when the dashboard serves plain HTTP.
func (s *Server) TLSConfig() *tls.Config { return s.tls }

// isLoopback reports whether addr (host:port) listens on loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ServeHTTP serves the dashboard with its security headers, to requests
// for a name it is served as and, when a password is set, that carry it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; form-action 'self'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if !s.servedAs(r) {
		// Before the password: a page that rebinds its name to this
		// address must not even be asked for it.
		http.Error(w, fmt.Sprintf("docket dashboard: refused: this dashboard is not served as %s (a page whose name leads here could read and drive it); "+
			"to reach it by that name, start it with --dashboard-host NAME (DOCKET_DASHBOARD_HOSTS)", strconv.QuoteToASCII(oneLine(r.Host, 100))), http.StatusMisdirectedRequest)
		return
	}
	if s.cfg.Password != "" && !s.authorized(w, r) {
		return
	}
	s.mux.ServeHTTP(w, r)
}

// page is what every template gets.
type page struct {
	Title   string
	Nav     string
	Refresh int
}

// render writes template name with data; a request marked partial (the
// page's own refresh) gets only the content.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	t := s.pages[name]
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	tmpl := "base"
	if r.Header.Get("X-Docket-Partial") == "1" {
		tmpl = "content"
	}
	if err := t.ExecuteTemplate(w, tmpl, data); err != nil {
		s.log.Warn("rendering a page failed", zap.String("page", name), zap.String("error", s.cfg.Redact(err.Error())))
	}
}

// fail shows an error page; the message never holds a credential.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	msg := s.cfg.Redact(err.Error())
	if status >= 500 {
		s.log.Warn("a dashboard request failed", zap.String("path", r.URL.EscapedPath()), zap.String("error", msg))
	}
	s.render(w, r, status, "error", struct {
		page
		Message string
	}{page{Title: "Error"}, msg})
}

func (s *Server) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), requestTimeout)
}

// checkPost refuses a POST that does not come from one of the dashboard's
// own pages: it must carry the token they hold, and an Origin, when the
// browser sends one, must be this server.
func (s *Server) checkPost(r *http.Request) error {
	if err := r.ParseForm(); err != nil {
		return err
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(s.csrf)) != 1 {
		return errors.New("this form is stale or did not come from the dashboard: reload the page and try again")
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return fmt.Errorf("a request from another site (%s) is refused", o)
		}
	}
	return nil
}

// since says how long ago t was, for people.
func since(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := time.Since(t)
	switch {
	case d < 0:
		return "in " + (-d).Round(time.Second).String()
	case d < time.Minute:
		return d.Round(time.Second).String() + " ago"
	case d < time.Hour:
		return d.Round(time.Second).String() + " ago"
	case d < 48*time.Hour:
		return d.Round(time.Minute).String() + " ago"
	}
	return t.UTC().Format("2006-01-02 15:04")
}

// query builds a /jobs URL with the non-empty values.
func jobsURL(vals ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(vals); i += 2 {
		if vals[i+1] != "" {
			q.Set(vals[i], vals[i+1])
		}
	}
	if len(q) == 0 {
		return "/jobs"
	}
	return "/jobs?" + q.Encode()
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}
