package dashboard

import (
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Wrong passwords are throttled per client address: a client may send
// freeGuesses wrong ones, then must wait before each next attempt, 1 s
// after the first past them and twice as long after each further one, up
// to guessWaitMax. A right password resets its count. Without it, 300
// guesses took 3.5 s.
const (
	freeGuesses  = 5
	guessWaitMax = 15 * time.Minute
	// maxClients bounds the clients remembered; past it, new clients share
	// one count.
	maxClients = 10000
)

type throttle struct {
	mu      sync.Mutex
	now     func() time.Time
	clients map[string]*guesses
}

// guesses are one client's consecutive wrong passwords.
type guesses struct {
	wrong int
	last  time.Time
	// refused is set once a refusal was logged for the current wait.
	refused bool
}

func newThrottle(now func() time.Time) *throttle {
	return &throttle{now: now, clients: map[string]*guesses{}}
}

// wait is how long after its last wrong password a client that sent wrong
// ones waits.
func wait(wrong int) time.Duration {
	if wrong < freeGuesses {
		return 0
	}
	if wrong-freeGuesses >= 20 {
		return guessWaitMax
	}
	return min(time.Second<<(wrong-freeGuesses), guessWaitMax)
}

// key is the entry client counts under: its own, or, once maxClients are
// remembered (after forgetting those quiet for guessWaitMax), one shared
// by every client not yet remembered. t.mu is held.
func (t *throttle) key(client string, now time.Time) string {
	if t.clients[client] != nil || len(t.clients) < maxClients {
		return client
	}
	for c, g := range t.clients {
		if now.Sub(g.last) > guessWaitMax {
			delete(t.clients, c)
		}
	}
	if len(t.clients) < maxClients {
		return client
	}
	return "(many clients)"
}

// allow reports whether client may try a password now; when not, how long
// it waits, and whether this is the first refusal of that wait.
func (t *throttle) allow(client string) (ok bool, left time.Duration, first bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	g := t.clients[t.key(client, now)]
	if g == nil {
		return true, 0, false
	}
	left = g.last.Add(wait(g.wrong)).Sub(now)
	if left <= 0 {
		g.refused = false
		return true, 0, false
	}
	first = !g.refused
	g.refused = true
	return false, left, first
}

// wrong records a wrong password of client and returns how many it sent
// in a row.
func (t *throttle) wrong(client string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	k := t.key(client, now)
	g := t.clients[k]
	if g == nil {
		g = &guesses{}
		t.clients[k] = g
	}
	g.wrong++
	g.last = now
	return g.wrong
}

// right forgets client's wrong passwords.
func (t *throttle) right(client string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.clients, client)
}

// clientOf is the address r came from: its IP, or its /64 for IPv6 (one
// machine commonly holds a whole /64).
func clientOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return host
	case ip.To4() != nil:
		return ip.String()
	}
	return (&net.IPNet{IP: ip.Mask(net.CIDRMask(64, 128)), Mask: net.CIDRMask(64, 128)}).String()
}

// authorized reports whether r carries the password; when not, it has
// answered: 401 asking for it, or 429 while its client must wait after
// wrong ones. Wrong passwords and refusals are logged, the user name
// quoted (it is the client's text).
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	client := clientOf(r)
	if ok, left, first := s.guesses.allow(client); !ok {
		secs := int((left + time.Second - 1) / time.Second)
		if first {
			s.log.Warn("dashboard: too many wrong passwords; refusing the client's attempts for a while",
				zap.String("client", strconv.QuoteToASCII(client)), zap.Int("wait_seconds", secs))
		}
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		http.Error(w, fmt.Sprintf("docket dashboard: too many wrong passwords from your address: try again in %d s", secs), http.StatusTooManyRequests)
		return false
	}
	user, pw, ok := r.BasicAuth()
	if ok && subtle.ConstantTimeCompare([]byte(pw), []byte(s.cfg.Password)) == 1 {
		s.guesses.right(client)
		return true
	}
	if ok {
		// A browser's first request carries no password: only a wrong
		// one counts.
		n := s.guesses.wrong(client)
		s.log.Warn("dashboard: wrong password", zap.String("client", strconv.QuoteToASCII(client)),
			zap.String("user", strconv.QuoteToASCII(oneLine(user, 64))), zap.Int("wrong_in_a_row", n),
			zap.Duration("next_attempt_in", wait(n)))
	}
	w.Header().Set("WWW-Authenticate", `Basic realm="docket", charset="UTF-8"`)
	http.Error(w, "the dashboard needs its password", http.StatusUnauthorized)
	return false
}
