package queue

// Watching the running parents a link found (step 1 of deps.go).
//
// A parent the link reads running may have been claimed before the link
// marked it: its worker, which learns of dependents from the claimed job,
// then does not settle them after its finishing write, and they would
// wait for the leader's pass. So the process that linked watches such
// parents for a while and settles each once it has finished:
//
//   - finished before the link read it: the link applies its outcome, and
//     nothing is watched;
//   - finished after the read: the mark came before its finishing write,
//     which so flagged it due; the watch reads it finished and settles it,
//     as its worker may too when it claimed it after the mark, and the
//     leader's pass: a settle is conditioned on the flag and safe to run
//     again and at once from many processes;
//   - the watching process stops, or the parent runs past the watch: it
//     stays due, and the leader's pass settles it.
//
// A parent read available or blocked is claimed after the mark: its worker
// knows.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

const (
	// watchFor is how long a linked running parent is watched; one that
	// runs longer is left to the leader's pass.
	watchFor = time.Minute
	// watchPollMax is the longest wait between two reads of the watched
	// parents: a read after 10 ms, then twice as long each time up to it.
	watchPollMax = 500 * time.Millisecond
	// watchMax bounds the parents watched at once (one read covers them);
	// those over it are left to the leader's pass.
	watchMax = 1000
	// watchReadTimeout bounds one read of the parents and their settles.
	watchReadTimeout = 10 * time.Second
)

// parentWatch is a client's set of running parents to settle once they
// finish; one goroutine reads them while it is not empty.
type parentWatch struct {
	mu     sync.Mutex
	until  map[string]time.Time // parent id → end of its watch
	active bool                 // a goroutine runs watchLoop
}

// runningParents returns those of ids that states says are running, but
// the job whose handler runs under ctx (WithRunningJob: its worker knows).
func runningParents(ctx context.Context, ids bson.A, states map[string]jobs.State) []string {
	self, _ := ctx.Value(runningKey{}).(runningJob)
	var out []string
	for _, v := range ids {
		if id, _ := v.(string); states[id] == jobs.StateRunning && id != self.id {
			out = append(out, id)
		}
	}
	return out
}

// watchParents watches the running parents ids until each has finished
// and been settled, or for watchFor.
func (c *Client) watchParents(ids []string) {
	if len(ids) == 0 {
		return
	}
	w := c.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	end := time.Now().Add(watchFor)
	for _, id := range ids {
		if _, ok := w.until[id]; !ok && len(w.until) >= watchMax {
			break
		}
		w.until[id] = end
	}
	if !w.active && len(w.until) > 0 {
		w.active = true
		go c.watchLoop()
	}
}

// watchLoop reads the watched parents, with a growing wait between reads,
// until none is left.
func (c *Client) watchLoop() {
	wait := 10 * time.Millisecond
	for {
		time.Sleep(wait)
		ids := c.watch.current(time.Now())
		if len(ids) == 0 {
			return
		}
		done, stop := c.settleWatched(ids)
		c.watch.drop(done, stop)
		wait = min(2*wait, watchPollMax)
	}
}

// current drops the watches that ended by now and returns the parents
// left; with none left, the loop ends (active false, under the lock, so
// that the next watchParents starts another).
func (w *parentWatch) current(now time.Time) bson.A {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids bson.A
	for id, end := range w.until {
		if now.After(end) {
			delete(w.until, id)
			continue
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		w.active = false
	}
	return ids
}

// drop stops watching done, or every parent when stop.
func (w *parentWatch) drop(done []string, stop bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if stop {
		clear(w.until)
	}
	for _, id := range done {
		delete(w.until, id)
	}
}

// settleWatched reads the parents ids and settles those that have
// finished. done are the parents no longer to watch: settled, no longer
// running (re-queued: their next claim sees the mark) or gone. A failure
// leaves the parent watched, for the next read; the leader's pass settles
// what the watch does not (so nothing is logged here). stop is true once
// the client is disconnected.
func (c *Client) settleWatched(ids bson.A) (done []string, stop bool) {
	ctx, cancel := context.WithTimeout(context.Background(), watchReadTimeout)
	defer cancel()
	states, _, err := c.statesOf(ctx, ids)
	if err != nil {
		return nil, errors.Is(err, mongo.ErrClientDisconnected)
	}
	for _, v := range ids {
		id := v.(string)
		st, found := states[id]
		switch {
		case found && st == jobs.StateRunning:
			continue
		case found && st.Finished():
			if _, err := c.settleDown(ctx, id); err != nil {
				continue
			}
		}
		done = append(done, id)
	}
	return done, false
}
