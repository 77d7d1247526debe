package docketprom

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
)

// DefaultPingTimeout bounds the database ping of one readiness check:
// shorter than Kubernetes' default probe timeout (1 s).
const DefaultPingTimeout = 800 * time.Millisecond

// Health answers the probes: the process is live while it answers, and
// ready once its database setup is done, while the database answers a
// ping, until it starts shutting down.
type Health struct {
	ping    func(context.Context) error
	timeout time.Duration
	pings   singleflight.Group // one ping at a time, shared by the probes asking meanwhile
	setUp   atomic.Bool
	closing atomic.Bool
}

// NewHealth returns the health of a process whose database answers ping.
// timeout bounds each ping; 0 means DefaultPingTimeout.
func NewHealth(ping func(context.Context) error, timeout time.Duration) *Health {
	if timeout <= 0 {
		timeout = DefaultPingTimeout
	}
	return &Health{ping: ping, timeout: timeout}
}

// SetUp records that the database setup (docket's indexes) is done.
func (h *Health) SetUp() { h.setUp.Store(true) }

// ShuttingDown records that the process is stopping: it is no longer
// ready, whatever the database says.
func (h *Health) ShuttingDown() { h.closing.Store(true) }

// Ready returns nil when the process is ready to work, or why it is not,
// in a few words.
func (h *Health) Ready(ctx context.Context) error {
	if h.closing.Load() {
		return errors.New("shutting down")
	}
	// Probes that ask while a ping is under way share its answer: however
	// many requests come (a page in a browser can send many), the database
	// gets one ping at a time.
	_, err, _ := h.pings.Do("ping", func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.timeout)
		defer cancel()
		return nil, h.ping(ctx)
	})
	if err != nil {
		// Only the few words: a driver's error names hosts, and a probe's
		// body ends up in events anyone with kubectl reads.
		return errors.New("database not reachable")
	}
	if !h.setUp.Load() {
		return errors.New("database setup (indexes) not done yet")
	}
	return nil
}

// Handler serves /metrics from g, /healthz and /readyz from h.
func Handler(g prometheus.Gatherer, h *Health) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := h.Ready(r.Context()); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Server is the HTTP server of the metrics and probes.
type Server struct {
	srv  *http.Server
	addr net.Addr
	done chan struct{}
}

// Serve listens on addr (host:port; port 0 picks a free one) and serves h
// until Shutdown. It fails at once if the address cannot be listened on.
func Serve(addr string, h http.Handler, log *zap.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http.addr: %w", err)
	}
	s := &Server{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          zap.NewStdLog(log.Named("http")),
		},
		addr: ln.Addr(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", zap.Error(err))
		}
	}()
	return s, nil
}

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.addr.String() }

// Shutdown stops the server, letting requests in flight end within ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}
