package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docketq/docket/internal/leadership"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/event"
)

// monitor counts the commands a client sends, with the driver's command
// monitor, and learns from them how long claims take and how many jobs
// were completed, without hooks in docket.
type monitor struct {
	jobsColl string

	commands  atomic.Int64
	completed atomic.Int64
	polls     atomic.Int64 // claims: single findAndModify or a batch's find
	leader    atomic.Int64 // commands on the leader election's collection
	renewals  atomic.Int64 // lease renewals and their read backs (heartbeats.go)
	pauses    atomic.Int64 // reads of the queues' paused states
	registry  atomic.Int64 // the worker registry's beats
	claimCmds atomic.Int64 // claims' commands: findAndModify, a batch's find, stamp and read-back
	doneCmds  atomic.Int64 // completions' commands
	givenBack atomic.Int64 // jobs given back unstarted, their attempt not counted
	claimErrs atomic.Int64 // claims' commands that failed (a timeout, a lost reply)

	mu      sync.Mutex
	byName  map[string]int64
	started map[int64]cmdKind
	names   map[int64]string
	claims  []float64 // claim round trips, ms
	taken   int       // claims already reported by takeClaims
	pending time.Duration
}

type cmdKind int

const (
	cmdOther        cmdKind = iota
	cmdClaim                // findAndModify with a sort: a single claim
	cmdBatchFind            // find with a sort: a batch claim's candidates
	cmdBatchUpdate          // updates to running: a batch claim's stamp
	cmdComplete             // update to succeeded: one or many completions
	cmdGiveBack             // update taking a claim's attempt back: jobs given back unstarted
	cmdHandoff              // a completion and the stamp of the successor it hands its run slots to
	cmdCompleteRead         // a completion that returns the job (findAndModify: one with dependents)
)

func newMonitor(jobsColl string) *monitor {
	return &monitor{jobsColl: jobsColl, byName: map[string]int64{}, started: map[int64]cmdKind{}, names: map[int64]string{}}
}

func (m *monitor) commandMonitor() *event.CommandMonitor {
	return &event.CommandMonitor{
		Started:   m.onStarted,
		Succeeded: m.onSucceeded,
		Failed:    m.onFailed,
	}
}

func (m *monitor) onStarted(_ context.Context, e *event.CommandStartedEvent) {
	m.commands.Add(1)
	k := m.classify(e)
	if k == cmdClaim || k == cmdBatchFind {
		m.polls.Add(1)
	}
	switch k {
	case cmdClaim, cmdBatchFind, cmdBatchUpdate:
		m.claimCmds.Add(1)
	case cmdComplete, cmdHandoff, cmdCompleteRead:
		m.doneCmds.Add(1)
	}
	if coll, _ := e.Command.Lookup(e.CommandName).StringValueOK(); coll == leadership.DefaultCollection {
		m.leader.Add(1)
	}
	if isRenewal(m.jobsColl, e) {
		m.renewals.Add(1)
	}
	switch coll, _ := e.Command.Lookup(e.CommandName).StringValueOK(); coll {
	case queue.DefaultQueuesCollection:
		m.pauses.Add(1)
	case queue.DefaultWorkersCollection:
		m.registry.Add(1)
	}
	m.mu.Lock()
	if traceCmds {
		m.names[e.RequestID] = traceName(k, e)
	}
	m.byName[e.CommandName]++
	if k != cmdOther {
		m.started[e.RequestID] = k
	}
	m.mu.Unlock()
}

func (m *monitor) classify(e *event.CommandStartedEvent) cmdKind {
	coll, _ := e.Command.Lookup(e.CommandName).StringValueOK()
	if coll != m.jobsColl {
		return cmdOther
	}
	switch comment, _ := e.Command.Lookup("comment").StringValueOK(); comment {
	case store.HandoffComment:
		return cmdHandoff
	case store.CompleteReadingComment:
		return cmdCompleteRead
	case store.ClaimReleasedComment:
		return cmdClaim // a chain's next task, released and claimed at once
	case store.SuccessorsComment:
		return cmdOther // a read ahead, no claim
	}
	switch e.CommandName {
	case "findAndModify":
		if _, err := e.Command.LookupErr("sort"); err == nil {
			return cmdClaim
		}
	case "find":
		if _, err := e.Command.LookupErr("sort"); err == nil {
			return cmdBatchFind
		}
	case "update":
		// The statements go in the command itself or, with OP_MSG, in a
		// document sequence the event folds into "updates".
		ups, ok := e.Command.Lookup("updates").ArrayOK()
		if !ok {
			return cmdOther
		}
		vals, err := ups.Values()
		if err != nil || len(vals) == 0 {
			return cmdOther
		}
		doc, ok := vals[0].DocumentOK()
		if !ok {
			return cmdOther
		}
		if inc, ok := doc.Lookup("u", "$inc", "attempt").AsInt64OK(); ok && inc < 0 {
			return cmdGiveBack
		}
		state, _ := doc.Lookup("u", "$set", "state").StringValueOK()
		switch state {
		case "succeeded":
			return cmdComplete
		case "running":
			return cmdBatchUpdate
		}
	}
	return cmdOther
}

func (m *monitor) onFailed(_ context.Context, e *event.CommandFailedEvent) {
	m.mu.Lock()
	k := m.started[e.RequestID]
	delete(m.started, e.RequestID)
	delete(m.names, e.RequestID)
	if k == cmdBatchUpdate || k == cmdBatchFind {
		m.pending = 0
	}
	m.mu.Unlock()
	switch k {
	case cmdClaim, cmdBatchFind, cmdBatchUpdate:
		m.claimErrs.Add(1)
	}
}

func (m *monitor) onSucceeded(_ context.Context, e *event.CommandSucceededEvent) {
	if traceCmds {
		m.mu.Lock()
		coll := m.names[e.RequestID]
		delete(m.names, e.RequestID)
		m.mu.Unlock()
		fmt.Fprintf(os.Stderr, "TRACE %d %s %s n=%d %v\n", time.Now().UnixMilli()%100000, e.CommandName, coll, traceCount(e), e.Duration.Round(time.Millisecond))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.started[e.RequestID]
	if !ok {
		return
	}
	delete(m.started, e.RequestID)
	m.tally(k, e)
}

// tally counts what the command of kind k that e answered did: a claim's
// time, the jobs it completed or gave back. m.mu is held.
func (m *monitor) tally(k cmdKind, e *event.CommandSucceededEvent) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	n, _ := e.Reply.Lookup("n").AsInt64OK()
	switch k {
	case cmdClaim:
		m.claims = append(m.claims, ms(e.Duration))
	case cmdBatchFind:
		// One dispatch goroutine per worker claims, so a batch's find and
		// its update follow each other; an empty find is a whole claim.
		if batch, ok := e.Reply.Lookup("cursor", "firstBatch").ArrayOK(); ok {
			if vals, _ := batch.Values(); len(vals) == 0 {
				m.claims = append(m.claims, ms(e.Duration))
				return
			}
		}
		m.pending = e.Duration
	case cmdBatchUpdate:
		m.claims = append(m.claims, ms(m.pending+e.Duration))
		m.pending = 0
	case cmdComplete:
		m.completed.Add(n)
	case cmdCompleteRead:
		if v, ok := e.Reply.Lookup("value").DocumentOK(); ok && len(v) > 0 {
			m.completed.Add(1)
		}
	case cmdGiveBack:
		m.givenBack.Add(n)
	case cmdHandoff:
		// n counts the completion and the successor's stamp: one
		// completion when either matched (a completion whose lease was
		// lost with its successor claimed counts one too many; it takes
		// a stalled, reaped job).
		if n > 0 {
			m.completed.Add(1)
		}
	}
}

// traceSuffix names the kinds of commands in a trace line.
var traceSuffix = map[cmdKind]string{
	cmdClaim: "/claim", cmdBatchFind: "/bfind", cmdBatchUpdate: "/stamp", cmdComplete: "/complete",
	cmdHandoff: "/handoff", cmdCompleteRead: "/complete-read",
}

// traceName is how a trace line (DOCKET_BENCH_TRACE) names the command
// of kind k that e starts: its collection, its kind, and a find's limit
// or another command's filter keys.
func traceName(k cmdKind, e *event.CommandStartedEvent) string {
	name, _ := e.Command.Lookup(e.CommandName).StringValueOK()
	if e.CommandName == "getMore" {
		name, _ = e.Command.Lookup("collection").StringValueOK()
	}
	name += traceSuffix[k]
	if f, ok := e.Command.Lookup("filter").DocumentOK(); ok && k == cmdBatchFind && f.Lookup("leaseToken").Type != 0 {
		name += "/readback"
	}
	if l, ok := e.Command.Lookup("limit").AsInt64OK(); ok && e.CommandName == "find" {
		name += fmt.Sprintf(" limit=%d", l)
	}
	if k == cmdOther && (e.CommandName == "update" || e.CommandName == "find") {
		name += " q=" + filterKeys(e)
	}
	return name
}

// traceCount is how many documents the reply e tells of (-1: none said).
func traceCount(e *event.CommandSucceededEvent) int64 {
	n := int64(-1)
	if v, ok := e.Reply.Lookup("n").AsInt64OK(); ok {
		n = v
	}
	if b, ok := e.Reply.Lookup("cursor", "firstBatch").ArrayOK(); ok {
		vs, _ := b.Values()
		n = int64(len(vs))
	}
	if v, ok := e.Reply.Lookup("value").DocumentOK(); ok && len(v) > 0 {
		n = 1
	} else if !ok && e.CommandName == "findAndModify" {
		n = 0
	}
	return n
}

// snapshot is what a worker process reports.
type snapshot struct {
	Commands  int64            `json:"commands"`
	Completed int64            `json:"completed"`
	Polls     int64            `json:"polls"`
	Leader    int64            `json:"leader"`
	Renewals  int64            `json:"renewals"`
	Pauses    int64            `json:"pauses"`
	Registry  int64            `json:"registry"`
	Ready     bool             `json:"ready,omitempty"`
	Final     bool             `json:"final,omitempty"`
	ByName    map[string]int64 `json:"byName,omitempty"`
	ClaimMs   []float64        `json:"claimMs,omitempty"`
	ClaimCmds int64            `json:"claimCmds,omitempty"`
	DoneCmds  int64            `json:"doneCmds,omitempty"`
	// GivenBack counts the jobs given back unstarted (a claim's attempt
	// taken back), ClaimErrors the claims' commands that failed.
	GivenBack   int64 `json:"givenBack,omitempty"`
	ClaimErrors int64 `json:"claimErrors,omitempty"`
	// NewClaimMs, in a worker's periodic reports, are the claim round trips
	// answered since its previous report (takeClaims).
	NewClaimMs []float64 `json:"newClaimMs,omitempty"`
}

func (m *monitor) snapshot(full bool) snapshot {
	s := snapshot{Commands: m.commands.Load(), Completed: m.completed.Load(), Polls: m.polls.Load(), Leader: m.leader.Load(), Renewals: m.renewals.Load(),
		Pauses: m.pauses.Load(), Registry: m.registry.Load()}
	s.ClaimCmds, s.DoneCmds = m.claimCmds.Load(), m.doneCmds.Load()
	s.GivenBack, s.ClaimErrors = m.givenBack.Load(), m.claimErrs.Load()
	if full {
		m.mu.Lock()
		s.ByName = make(map[string]int64, len(m.byName))
		for k, v := range m.byName {
			s.ByName[k] = v
		}
		s.ClaimMs = append([]float64(nil), m.claims...)
		m.mu.Unlock()
	}
	return s
}

// takeClaims returns the claim round trips answered since its previous
// call.
func (m *monitor) takeClaims() []float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := append([]float64(nil), m.claims[m.taken:]...)
	m.taken = len(m.claims)
	return s
}

// traceCmds, set by DOCKET_BENCH_TRACE=1, makes each worker process print
// every command it sends as it is answered: the time (ms), the command,
// its collection (and for the jobs collection what it is: a single claim,
// a batch claim's find, stamp or read-back, a completion), the documents
// it returned or matched and its round trip. It shows where a run's
// commands go.
var traceCmds = os.Getenv("DOCKET_BENCH_TRACE") != ""

// filterKeys names the top-level keys of the filter of a find, or of the
// first statement of an update (traceCmds).
func filterKeys(e *event.CommandStartedEvent) string {
	f, ok := e.Command.Lookup("filter").DocumentOK()
	if e.CommandName == "update" {
		f, ok = e.Command.Lookup("updates", "0", "q").DocumentOK()
	}
	if !ok {
		return "?"
	}
	els, _ := f.Elements()
	keys := make([]string, len(els))
	for i, el := range els {
		keys[i] = el.Key()
	}
	return strings.Join(keys, ",")
}
