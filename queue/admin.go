package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The operator's view of the jobs collection: listing, retrying, deleting
// and purging jobs. Every write here is conditioned on the state it was
// decided on, and none ever touches a running job: its worker holds it.

// JobFilter selects jobs. Empty fields select everything.
type JobFilter struct {
	// JobIDs, when set, selects these jobs only, by ids of any type (a job
	// another application wrote with _id 7); StringJobID makes one of a
	// string id.
	JobIDs []JobID
	// States, Kinds and Queues select jobs in any of them.
	States []jobs.State
	Kinds  []string
	Queues []string
	// CreatedAfter and CreatedBefore bound the jobs' createdAt.
	CreatedAfter, CreatedBefore time.Time
}

func (f JobFilter) query() bson.D {
	q := bson.D{}
	in := func(field string, vals []string) {
		if len(vals) > 0 {
			q = append(q, bson.E{Key: field, Value: bson.D{{Key: "$in", Value: vals}}})
		}
	}
	ids := make(bson.A, 0, len(f.JobIDs))
	for _, id := range f.JobIDs {
		if !id.IsZero() { // names no job
			ids = append(ids, id.v)
		}
	}
	switch {
	case len(ids) == 0 && len(f.JobIDs) > 0:
		// Only zero JobIDs, which name no job: the filter selects none.
		q = append(q, bson.E{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{}}}})
	case len(ids) == 1:
		// An equality, not an $in of one: the same plan on MongoDB, and
		// one that a server which looks up only a lone _id equality by
		// its index (server.go in internal/store) does not scan for.
		q = append(q, bson.E{Key: "_id", Value: ids[0]})
	case len(ids) > 1:
		q = append(q, bson.E{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}})
	}
	states := make([]string, len(f.States))
	for i, s := range f.States {
		states[i] = string(s)
	}
	in("state", states)
	in("kind", f.Kinds)
	in("queue", f.Queues)
	created := bson.D{}
	if !f.CreatedAfter.IsZero() {
		created = append(created, bson.E{Key: "$gte", Value: f.CreatedAfter})
	}
	if !f.CreatedBefore.IsZero() {
		created = append(created, bson.E{Key: "$lt", Value: f.CreatedBefore})
	}
	if len(created) > 0 {
		q = append(q, bson.E{Key: "createdAt", Value: created})
	}
	return q
}

// JobSummary is a job as an operator lists it. Fields are read one by one
// from the stored document: a job another application wrote with fields of
// other types is still listed, with what can be read.
type JobSummary struct {
	// ID is the id for people: the string, or another type's value in
	// extended JSON ({"$numberInt":"7"}).
	ID string
	// JobID is the id as stored, of its type: its Token names it in a URL
	// or on a command line, and pages a List.
	JobID JobID
	Kind  string
	Queue string
	// State is the stored state, as jobs.Job's: one of the five, or, in a
	// document another application wrote, any string.
	State       jobs.State
	Attempt     int
	MaxAttempts int
	CreatedAt   time.Time
	UpdatedAt   time.Time
	// LastError is the message of the newest recorded attempt error.
	LastError string
	// Progress is the job's progress (jobs.ProgressReport), nil when it has
	// none; read from a document another application wrote, a fraction
	// that is not a number from 0 to 1 is NaN (Known is false).
	Progress *jobs.ProgressReport
	// Raw is the stored document.
	Raw bson.Raw
}

// summarize reads a JobSummary from a stored job document.
func summarize(raw bson.Raw) JobSummary {
	s := JobSummary{Raw: raw, JobID: JobIDOf(raw)}
	s.ID = s.JobID.String()
	s.Kind, _ = raw.Lookup("kind").StringValueOK()
	s.Queue, _ = raw.Lookup("queue").StringValueOK()
	state, _ := raw.Lookup("state").StringValueOK()
	s.State = jobs.State(state)
	attempt, _ := raw.Lookup("attempt").AsInt64OK()
	maxAttempts, _ := raw.Lookup("maxAttempts").AsInt64OK()
	s.Attempt, s.MaxAttempts = int(attempt), int(maxAttempts)
	if t, ok := raw.Lookup("createdAt").TimeOK(); ok {
		s.CreatedAt = t.UTC()
	}
	if t, ok := raw.Lookup("updatedAt").TimeOK(); ok {
		s.UpdatedAt = t.UTC()
	}
	if errs, ok := raw.Lookup("errors").ArrayOK(); ok {
		if vals, err := errs.Values(); err == nil && len(vals) > 0 {
			if d, ok := vals[len(vals)-1].DocumentOK(); ok {
				s.LastError, _ = d.Lookup("message").StringValueOK()
			}
		}
	}
	if v := raw.Lookup("progress"); v.Type != 0 && v.Type != bson.TypeNull {
		var p jobs.ProgressReport
		_ = p.UnmarshalBSONValue(byte(v.Type), v.Value) // never fails
		s.Progress = &p
	}
	return s
}

// List returns up to limit jobs that f selects, in id order, starting after
// the job whose JobID's Token is after ("" from the start), and whether
// there are more: the next page starts after the Token of the last job's
// JobID. Ids of every type are listed and paged in MongoDB's order of
// _id values (numbers, then strings, then ObjectIds, …), so no job is
// skipped whatever the types of the ids around it.
func (c *Client) List(ctx context.Context, f JobFilter, after string, limit int) ([]JobSummary, bool, error) {
	start, err := ParseJobID(after)
	if err != nil {
		return nil, false, fmt.Errorf("queue: list jobs after %w", err)
	}
	find := func() (*mongo.Cursor, error) {
		q := f.query()
		if !start.IsZero() {
			q = append(q, afterID(start, c.srv.TypeAliases.Lacking())...)
		}
		return c.coll.Find(ctx, q, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(limit)+1))
	}
	cur, err := find()
	if !start.IsZero() && !c.srv.TypeAliases.Lacking() && c.srv.TypeAliases.Detect(err) {
		// A server that knows fewer BSON types can store none of the
		// others: page without them.
		cur, err = find()
	}
	if err != nil {
		return nil, false, fmt.Errorf("queue: list jobs: %w", err)
	}
	defer store.CloseCursor(ctx, cur)
	var out []JobSummary
	for cur.Next(ctx) {
		out = append(out, summarize(append(bson.Raw(nil), cur.Current...)))
	}
	if err := cur.Err(); err != nil {
		return nil, false, fmt.Errorf("queue: list jobs: %w", err)
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, nil
}

// Outcomes of an operator's action on one job.
var (
	// ErrJobRunning: the job is running; its worker holds it, and the
	// action leaves it alone.
	ErrJobRunning = errors.New("job is running")
	// ErrUniqueKeyHeld: retrying the job would give it back a unique key
	// that an unfinished job now holds.
	ErrUniqueKeyHeld = errors.New("an unfinished job holds its unique key")
	// ErrNotFinished: the job has not finished; delete it with force.
	ErrNotFinished = errors.New("job has not finished")
	// ErrStateChanged: the job's state changed between the action's read
	// and its write (another process acted on it), so it was left alone;
	// the action may be asked again.
	ErrStateChanged = errors.New("its state changed meanwhile")
)

// stateChanged is the ActionResult.Err of a job whose state changed from
// from before the write conditioned on it.
func stateChanged(from string) error {
	return fmt.Errorf("%w (it was %q); left alone", ErrStateChanged, from)
}

// ActionResult is what an action did to one job.
type ActionResult struct {
	// ID is the job's id for people (see JobSummary.ID).
	ID string
	// JobID is the job's id as stored.
	JobID JobID
	// From is the state the job was in.
	From string
	// Err says why the job was left alone; nil when the action was done.
	Err error

	queue string // the job's queue, for Retry's admission
	kind  string // the job's kind: a workflow's gate is not retried
}

// matching returns the ids and states of the jobs f selects, whatever the
// types of their ids; with f.JobIDs set, an id no job has is
// returned with ErrNotFound.
func (c *Client) matching(ctx context.Context, f JobFilter) ([]ActionResult, error) {
	cur, err := c.coll.Find(ctx, f.query(), options.Find().SetProjection(bson.D{{Key: "state", Value: 1}, {Key: "queue", Value: 1}, {Key: "kind", Value: 1}}).SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("queue: find jobs: %w", err)
	}
	defer store.CloseCursor(ctx, cur)
	found := map[string]bool{} // by token: of the id's type
	var out []ActionResult
	for cur.Next(ctx) {
		id := JobIDOf(cur.Current)
		state, _ := cur.Current.Lookup("state").StringValueOK()
		q, _ := cur.Current.Lookup("queue").StringValueOK()
		kind, _ := cur.Current.Lookup("kind").StringValueOK()
		found[id.Token()] = true
		out = append(out, ActionResult{ID: id.String(), JobID: id, From: state, queue: q, kind: kind})
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("queue: find jobs: %w", err)
	}
	for _, id := range f.JobIDs {
		if !found[id.Token()] {
			found[id.Token()] = true
			out = append(out, ActionResult{ID: id.String(), JobID: id, Err: ErrNotFound})
		}
	}
	return out, nil
}

// Retry makes the jobs f selects available now, with their attempts
// reset, their past errors kept and an earlier success's result cleared:
// dead, cancelled and succeeded jobs run again, an available one runs now.
// A running job is left alone (ErrJobRunning); so is a finished job whose
// unique key an unfinished job now holds (ErrUniqueKeyHeld). Each write is
// conditioned on the state it was decided on. A job enqueued with parents
// goes back to blocked and waits for them again (those that succeeded
// release it at once); a blocked job is left alone, and so is a succeeded
// job that others waited for (ErrHasDependents). A finished job of a
// bounded queue is admitted again as an enqueue would be, holding a slot
// of the capacity in the same write; when its queue is full it is left
// alone with a *QueueFullError.
func (c *Client) Retry(ctx context.Context, f JobFilter) ([]ActionResult, error) {
	found, err := c.matching(ctx, f)
	if err != nil {
		return nil, err
	}
	limits, err := c.capacityOf(ctx)
	if err != nil {
		return nil, err
	}
	t := c.now()
	for i := range found {
		r := &found[i]
		if r.Err != nil {
			continue
		}
		if !jobs.State(r.From).Valid() || r.From == string(jobs.StateRunning) {
			r.Err = ErrJobRunning
			if r.From != string(jobs.StateRunning) {
				r.Err = fmt.Errorf("%w %q: not one docket knows", ErrUnknownState, r.From)
			}
			continue
		}
		if r.kind == WorkflowGateKind {
			// Made available, no handler would run it: its workflow
			// is published once, by its builder (workflow.go).
			r.Err = ErrWorkflowGate
			continue
		}
		if done, err := c.retryWithParents(ctx, r, t, limits); err != nil {
			return found, err
		} else if done {
			continue
		}
		update := rerun(jobs.StateAvailable, jobs.State(r.From), t)
		if jobs.State(r.From).Finished() {
			// A finished job of a bounded queue is admitted again, as an
			// enqueue would be: it holds a slot, or stays finished.
			if capacity, ok := limits[r.queue]; ok {
				switch err := c.readmit(ctx, retryFilter(r), update, r.queue, capacity); {
				case errors.Is(err, errRetryMissed):
					r.Err = stateChanged(r.From)
				case errors.Is(err, ErrQueueFull), errors.Is(err, ErrUniqueKeyHeld):
					r.Err = err
				case err != nil:
					return found, fmt.Errorf("queue: retry job %s: %w", r.ID, err)
				}
				continue
			}
		}
		res, err := c.coll.UpdateOne(ctx, retryFilter(r), update)
		switch {
		case store.IsDuplicateKey(err):
			r.Err = ErrUniqueKeyHeld
		case err != nil:
			return found, fmt.Errorf("queue: retry job %s: %w", r.ID, err)
		case res.MatchedCount == 0:
			r.Err = stateChanged(r.From)
		}
	}
	return found, nil
}

// rerun is Retry's update of a job in state from: it runs again from its
// first attempt, in state s from t, with set's fields besides. What its
// past run left goes: its lease, its end, its progress and its result (a
// new attempt's result is only what that attempt sets); a finished job
// holds its unique key again.
func rerun(s, from jobs.State, t time.Time, set ...bson.E) bson.D {
	update := bson.D{
		{Key: "$set", Value: append(bson.D{
			{Key: "state", Value: s}, {Key: "runAt", Value: t},
			{Key: "attempt", Value: 0}, {Key: "updatedAt", Value: t},
		}, set...)},
		{Key: "$unset", Value: bson.D{
			{Key: "finishedAt", Value: ""}, {Key: "cancelRequestedAt", Value: ""}, {Key: "result", Value: ""},
			{Key: "leaseToken", Value: ""}, {Key: "leaseExpiresAt", Value: ""}, {Key: "heartbeatAt", Value: ""},
			{Key: "progress", Value: ""},
		}},
	}
	if from.Finished() {
		update = append(update, bson.E{Key: "$rename", Value: bson.D{{Key: "finishedUniqueKey", Value: "uniqueKey"}}})
	}
	return update
}

// Delete removes the jobs f selects that have finished; with force, also
// those that are available or blocked. A running job is never removed, nor
// one that jobs wait for until they have been told of its outcome
// (ErrHasDependents).
func (c *Client) Delete(ctx context.Context, f JobFilter, force bool) ([]ActionResult, error) {
	found, err := c.matching(ctx, f)
	if err != nil {
		return nil, err
	}
	for i := range found {
		r := &found[i]
		if r.Err != nil {
			continue
		}
		s := jobs.State(r.From)
		switch {
		case s == jobs.StateRunning:
			r.Err = ErrJobRunning
			continue
		case !s.Finished() && !force:
			r.Err = fmt.Errorf("%w (it is %q); --force deletes it", ErrNotFinished, r.From)
			continue
		}
		res, err := c.coll.DeleteOne(ctx, append(bson.D{{Key: "_id", Value: r.JobID.v}, {Key: "state", Value: r.From}}, deletable(s)...))
		if err != nil {
			return found, fmt.Errorf("queue: delete job %s: %w", r.ID, err)
		}
		if res.DeletedCount == 0 {
			r.Err = c.whyNotDeleted(ctx, r)
		}
	}
	return found, nil
}

// Purge deletes the jobs that finished in state s more than age ago, and
// returns how many.
func (c *Client) Purge(ctx context.Context, s jobs.State, age time.Duration) (int64, error) {
	if !s.Finished() {
		return 0, fmt.Errorf("queue: purge: state %q is not a finished state (succeeded, dead, cancelled)", s)
	}
	// Jobs whose dependents have not been told of their outcome stay
	// (store.NotDue).
	res, err := c.coll.DeleteMany(ctx, bson.D{{Key: "state", Value: s}, {Key: "finishedAt", Value: bson.D{{Key: "$lt", Value: c.now().Add(-age)}}}, store.NotDue})
	if err != nil {
		return 0, fmt.Errorf("queue: purge %s jobs: %w", s, err)
	}
	return res.DeletedCount, nil
}

// QueueStats are the counts of one queue.
type QueueStats struct {
	// Queue is the queue's name; for jobs another application wrote
	// without one, "(missing)", or with one of another type, the type's
	// name in parentheses ("(32-bit integer)"). So are kinds and states.
	Queue string
	// Counts maps kind, then state, to how many jobs there are: the state
	// as jobs.Job has it.
	Counts map[string]map[jobs.State]int64
	// OldestAvailable is the runAt of the queue's longest-waiting runnable
	// job; zero when none waits.
	OldestAvailable time.Time
}

// Stats counts the jobs per queue, kind and state, and finds each queue's
// longest-waiting runnable job, in one pass over the collection (on
// MongoDB the claim index holds every field the pass reads).
func (c *Client) Stats(ctx context.Context) ([]QueueStats, error) {
	if c.srv.GroupMin.Lacking() {
		stats, _, err := c.scanStats(ctx, time.Time{}, nil)
		return stats, err
	}
	group := bson.D{
		{Key: "_id", Value: bson.D{{Key: "queue", Value: "$queue"}, {Key: "kind", Value: "$kind"}, {Key: "state", Value: "$state"}}},
		{Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}},
		{Key: "oldest", Value: bson.D{{Key: "$min", Value: "$runAt"}}},
	}
	cur, err := c.coll.Aggregate(ctx, mongo.Pipeline{{{Key: "$group", Value: group}}})
	if c.srv.GroupMin.Detect(err) {
		// No $min accumulator: count in one pass of our own instead
		// (scanStats).
		return c.Stats(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: stats: %w", err)
	}
	defer store.CloseCursor(ctx, cur)
	return groupedStats(ctx, cur, c.now())
}

// groupedStats tallies the groups of Stats's $group, one a document.
func groupedStats(ctx context.Context, cur *mongo.Cursor, now time.Time) ([]QueueStats, error) {
	tally := newStatsTally(now)
	for cur.Next(ctx) {
		id, _ := cur.Current.Lookup("_id").DocumentOK()
		q, kind, state := statsLabel(id.Lookup("queue")), statsLabel(id.Lookup("kind")), statsLabel(id.Lookup("state"))
		n, _ := cur.Current.Lookup("n").AsInt64OK()
		oldest, ok := cur.Current.Lookup("oldest").TimeOK()
		tally.add(q, kind, state, n, oldest, ok)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("queue: stats: %w", err)
	}
	return tally.stats(), nil
}

// finishedTimes returns when the jobs that ended in each of states at or after
// since ended. It reads the finished index only.
func (c *Client) finishedTimes(ctx context.Context, since time.Time, states ...jobs.State) (map[jobs.State][]time.Time, error) {
	cur, err := c.coll.Find(ctx,
		bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: states}}}, {Key: "finishedAt", Value: bson.D{{Key: "$gte", Value: since}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 0}, {Key: "state", Value: 1}, {Key: "finishedAt", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("queue: jobs finished since %s: %w", since.Format(time.RFC3339), err)
	}
	defer store.CloseCursor(ctx, cur)
	out := map[jobs.State][]time.Time{}
	for cur.Next(ctx) {
		s, _ := cur.Current.Lookup("state").StringValueOK()
		if t, ok := cur.Current.Lookup("finishedAt").TimeOK(); ok {
			out[jobs.State(s)] = append(out[jobs.State(s)], t)
		}
	}
	return out, cur.Err()
}

// Overview returns Stats and, for each of states, when the jobs that ended
// in it at or after since ended: what the dashboard's overview shows: the
// $group of Stats and the finished index's range. On a server without
// $min (Server.GroupMin in internal/store), whose every query but an _id
// lookup scans the collection, it is one pass over the collection, not
// two.
func (c *Client) Overview(ctx context.Context, since time.Time, states ...jobs.State) ([]QueueStats, map[jobs.State][]time.Time, error) {
	if !c.srv.GroupMin.Lacking() {
		stats, err := c.Stats(ctx)
		if err != nil {
			return nil, nil, err
		}
		if !c.srv.GroupMin.Lacking() {
			finished, err := c.finishedTimes(ctx, since, states...)
			return stats, finished, err
		}
	}
	return c.scanStats(ctx, since, states)
}

// scanStats is Stats, and Finished when states are given, computed from
// one find over the whole collection that reads five fields of each job:
// for a server that cannot group with $min, where a query is a pass over
// the collection anyway. Values of other types (written by other apps) are
// counted under their type's name, as Stats does.
func (c *Client) scanStats(ctx context.Context, since time.Time, states []jobs.State) ([]QueueStats, map[jobs.State][]time.Time, error) {
	proj := bson.D{{Key: "_id", Value: 0}, {Key: "queue", Value: 1}, {Key: "kind", Value: 1}, {Key: "state", Value: 1}, {Key: "runAt", Value: 1}}
	if len(states) > 0 {
		proj = append(proj, bson.E{Key: "finishedAt", Value: 1})
	}
	cur, err := c.coll.Find(ctx, bson.D{}, options.Find().SetProjection(proj))
	if err != nil {
		return nil, nil, fmt.Errorf("queue: stats: %w", err)
	}
	tally := newStatsTally(c.now())
	finished := map[jobs.State][]time.Time{}
	wanted := map[string]bool{}
	for _, s := range states {
		wanted[string(s)] = true
	}
	err = store.EachRaw(ctx, cur, func(d bson.Raw) error {
		q, kind, state := statsLabel(d.Lookup("queue")), statsLabel(d.Lookup("kind")), statsLabel(d.Lookup("state"))
		runAt, ok := d.Lookup("runAt").TimeOK()
		tally.add(q, kind, state, 1, runAt, ok)
		if wanted[state] {
			if at, ok := d.Lookup("finishedAt").TimeOK(); ok && !at.Before(since) {
				finished[jobs.State(state)] = append(finished[jobs.State(state)], at)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("queue: stats: %w", err)
	}
	return tally.stats(), finished, nil
}

// statsLabel is how Stats names a job's queue, kind or state v: the
// string, or, for a document another application wrote, "(missing)" or
// the name of the value's type in parentheses ("(32-bit integer)"). A
// $group key holds no field for a value that is missing.
func statsLabel(v bson.RawValue) string {
	if s, ok := v.StringValueOK(); ok {
		return s
	}
	if v.Type == 0 {
		return "(missing)"
	}
	return "(" + v.Type.String() + ")"
}
