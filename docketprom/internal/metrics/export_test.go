package metrics

import (
	"time"

	"github.com/docketq/docket/internal/leadership"
	"github.com/docketq/docket/queue"
)

// SetCounts makes s hold stats as counted now in term, as refresh would
// after reading them: the database cannot hand back every string another
// application's driver can send (devdb stores U+FFFD for bytes that are
// not UTF-8; MongoDB stores them as given).
func (s *QueueStats) SetCounts(term leadership.Term, stats []queue.QueueStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.term, s.at, s.stats, s.every = term, time.Now(), stats, 0
}
