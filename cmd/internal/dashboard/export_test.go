package dashboard

import "time"

// SetClock makes the password throttle read the time from now.
func (s *Server) SetClock(now func() time.Time) {
	s.guesses.mu.Lock()
	defer s.guesses.mu.Unlock()
	s.guesses.now = now
}
