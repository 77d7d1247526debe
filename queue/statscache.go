package queue

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The counts the elected leader stores: the operator's tools read one small
// document instead of passing over the whole jobs collection per request.

// DefaultStatsCollection holds the counts the leader stores, beside the
// default jobs collection. A Client on another jobs collection C uses
// C_jobstats.
const DefaultStatsCollection = "jobstats"

// statsID is the _id of the one document of the stats collection.
const statsID = "counts"

// finishedWindow is how far back StoredStats.Finished counts the jobs that
// ended, per minute.
const finishedWindow = time.Hour

// Reading the stored counts says why there are none to read.
var (
	// ErrNoStoredStats: no leader has stored counts yet (no worker has
	// run, or an older docket did).
	ErrNoStoredStats = errors.New("no counts stored by a leader yet (is a worker running?)")
	// ErrStoredStatsMalformed: the stored document cannot be read as
	// counts (another application wrote it).
	ErrStoredStatsMalformed = errors.New("the stored counts are malformed")
)

// StoredStats are the jobs counted once, by the elected leader or now, with
// when and by whom.
type StoredStats struct {
	// Queues are the counts per queue, kind and state, as Stats returns.
	Queues []QueueStats
	// Finished counts the jobs that ended succeeded or dead per minute
	// (keyed by the minute's start, UTC) over the finishedWindow before
	// CountedAt.
	Finished map[jobs.State]map[time.Time]int64
	// CountedAt is when the count began, by the server's clock.
	CountedAt time.Time
	// Took is how long the count took.
	Took time.Duration
	// Every is how often the leader that counted means to count.
	Every time.Duration
	// By is the id of the process that counted; Term and TermToken its
	// leadership term, when a leader counted.
	By        string
	Term      int64
	TermToken string
	// Unreadable is how many stored entries could not be read and were
	// left out (another application wrote them).
	Unreadable int
	// ReadAt is the server's clock when the counts were read back; zero
	// for counts taken in this process.
	ReadAt time.Time
}

// Age is how old the counts were when they were read back, by the server's
// clock.
func (s StoredStats) Age() time.Duration {
	if s.ReadAt.IsZero() {
		return 0
	}
	return max(0, s.ReadAt.Sub(s.CountedAt))
}

// staleSlack is how much older than three of its leader's intervals
// stored counts may be before they are stale.
const staleSlack = time.Minute

// Stale reports whether counts read back are older than the pace of the
// leader that stored them explains (three of its intervals and a minute):
// no leader has counted since. Counts taken in this process never are.
func (s StoredStats) Stale() bool {
	return s.Age() > 3*s.Every+staleSlack
}

// statsColl is the collection of the stored counts.
func (c *Client) statsColl() *mongo.Collection { return c.st.BesideJobs(DefaultStatsCollection) }

// CountStats counts the jobs now: per queue, kind and state, each queue's
// longest-waiting runnable job, and the jobs that ended per minute over the
// last finishedWindow (the pass of Overview). CountedAt is the server's
// clock when the count began.
func (c *Client) CountStats(ctx context.Context) (StoredStats, error) {
	start := time.Now()
	at := c.st.ServerTime(ctx).Truncate(time.Millisecond)
	since := finishedSince(at)
	stats, finished, err := c.Overview(ctx, since, jobs.StateSucceeded, jobs.StateDead)
	if err != nil {
		return StoredStats{}, err
	}
	s := StoredStats{Queues: stats, CountedAt: at, Took: time.Since(start), Finished: map[jobs.State]map[time.Time]int64{}}
	for st, ts := range finished {
		perMinute := map[time.Time]int64{}
		for _, t := range ts {
			if !t.Before(since) {
				perMinute[t.UTC().Truncate(time.Minute)]++
			}
		}
		s.Finished[st] = perMinute
	}
	return s, nil
}

// finishedSince is the start of the minute finishedWindow before the minute
// of at: the minutes a chart ending at at shows.
func finishedSince(at time.Time) time.Time {
	return at.UTC().Truncate(time.Minute).Add(-finishedWindow + time.Minute)
}

// StoreStats stores s as the counts operators read, unless counts taken
// later are stored already: a leader that stalled and resumes after another
// took over cannot replace the newer counts with its older ones. It reports
// whether s was stored.
func (c *Client) StoreStats(ctx context.Context, s StoredStats) (bool, error) {
	doc := statsDoc(s)
	coll := c.statsColl()
	res, err := coll.ReplaceOne(ctx,
		bson.D{{Key: "_id", Value: statsID}, {Key: "countedAt", Value: bson.D{{Key: "$lt", Value: s.CountedAt}}}},
		doc, options.Replace().SetUpsert(true))
	if err == nil {
		return res.MatchedCount > 0 || res.UpsertedCount > 0, nil
	}
	if !mongo.IsDuplicateKeyError(err) {
		return false, fmt.Errorf("queue: store counts: %w", err)
	}
	// A document is stored that the condition did not match: newer counts,
	// or one whose countedAt is not a time. The latter is replaced, on the
	// condition that it still holds what was read.
	raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: statsID}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil // deleted meanwhile: the next count stores
	}
	if err != nil {
		return false, fmt.Errorf("queue: store counts: %w", err)
	}
	v := raw.Lookup("countedAt")
	if _, ok := v.TimeOK(); ok {
		return false, nil // newer counts, or as new: they stay
	}
	cond := bson.D{{Key: "_id", Value: statsID}}
	if v.Type == 0 {
		cond = append(cond, bson.E{Key: "countedAt", Value: bson.D{{Key: "$exists", Value: false}}})
	} else {
		cond = append(cond, bson.E{Key: "countedAt", Value: v})
	}
	res, err = coll.ReplaceOne(ctx, cond, doc)
	if err != nil {
		return false, fmt.Errorf("queue: store counts over a malformed document: %w", err)
	}
	return res.MatchedCount > 0, nil
}

// statsDoc is the stored form of s: lists of entries rather than maps, so
// that no name another application gave a queue or kind becomes a field
// name.
func statsDoc(s StoredStats) bson.D {
	queues := bson.A{}
	for _, qs := range s.Queues {
		counts := bson.A{}
		for _, k := range slices.Sorted(maps.Keys(qs.Counts)) {
			for _, st := range slices.Sorted(maps.Keys(qs.Counts[k])) {
				counts = append(counts, bson.D{{Key: "kind", Value: k}, {Key: "state", Value: st}, {Key: "n", Value: qs.Counts[k][st]}})
			}
		}
		q := bson.D{{Key: "queue", Value: qs.Queue}, {Key: "counts", Value: counts}}
		if !qs.OldestAvailable.IsZero() {
			q = append(q, bson.E{Key: "oldestAvailable", Value: qs.OldestAvailable})
		}
		queues = append(queues, q)
	}
	finished := bson.A{}
	for _, st := range []jobs.State{jobs.StateSucceeded, jobs.StateDead} {
		for _, m := range slices.SortedFunc(maps.Keys(s.Finished[st]), time.Time.Compare) {
			finished = append(finished, bson.D{{Key: "state", Value: string(st)}, {Key: "minute", Value: m}, {Key: "n", Value: s.Finished[st][m]}})
		}
	}
	return bson.D{
		{Key: "_id", Value: statsID},
		{Key: "countedAt", Value: s.CountedAt},
		{Key: "tookMs", Value: s.Took.Milliseconds()},
		{Key: "everyMs", Value: s.Every.Milliseconds()},
		{Key: "by", Value: s.By},
		{Key: "term", Value: s.Term},
		{Key: "termToken", Value: s.TermToken},
		{Key: "queues", Value: queues},
		{Key: "finished", Value: finished},
	}
}

// StoredStats reads the counts the leader stored last: one small document,
// whatever the number of jobs. It returns ErrNoStoredStats when there are
// none, and an error wrapping ErrStoredStatsMalformed when the document
// has no time of counting; entries that cannot be read are left out and
// counted in Unreadable.
func (c *Client) StoredStats(ctx context.Context) (StoredStats, error) {
	readAt := c.st.ServerTime(ctx)
	raw, err := c.statsColl().FindOne(ctx, bson.D{{Key: "_id", Value: statsID}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return StoredStats{}, ErrNoStoredStats
	}
	if err != nil {
		return StoredStats{}, fmt.Errorf("queue: read the stored counts: %w", err)
	}
	s, err := readStats(raw)
	if err != nil {
		return StoredStats{}, err
	}
	s.ReadAt = readAt
	return s, nil
}

// readStats reads a stored counts document field by field.
func readStats(raw bson.Raw) (StoredStats, error) {
	at, ok := raw.Lookup("countedAt").TimeOK()
	if !ok {
		v := raw.Lookup("countedAt")
		what := "missing"
		if v.Type != 0 {
			what = "a " + v.Type.String()
		}
		return StoredStats{}, fmt.Errorf("%w: countedAt is %s, not a time", ErrStoredStatsMalformed, what)
	}
	s := StoredStats{CountedAt: at.UTC(), Finished: map[jobs.State]map[time.Time]int64{}}
	if ms, ok := raw.Lookup("tookMs").AsInt64OK(); ok && ms >= 0 {
		s.Took = time.Duration(ms) * time.Millisecond
	}
	if ms, ok := raw.Lookup("everyMs").AsInt64OK(); ok && ms >= 0 {
		s.Every = time.Duration(ms) * time.Millisecond
	}
	s.By, _ = raw.Lookup("by").StringValueOK()
	s.Term, _ = raw.Lookup("term").AsInt64OK()
	s.TermToken, _ = raw.Lookup("termToken").StringValueOK()
	s.readQueues(raw.Lookup("queues"))
	s.readFinished(raw.Lookup("finished"))
	return s, nil
}

// readQueues adds the per-queue counts of v, the stored queues array;
// entries it cannot read are counted in s.Unreadable.
func (s *StoredStats) readQueues(v bson.RawValue) {
	byQueue := map[string]int{}
	for _, qv := range arrayValues(v, &s.Unreadable) {
		qd, ok := qv.DocumentOK()
		name, okName := qd.Lookup("queue").StringValueOK()
		if !ok || !okName {
			s.Unreadable++
			continue
		}
		i, seen := byQueue[name]
		if !seen {
			i = len(s.Queues)
			byQueue[name] = i
			s.Queues = append(s.Queues, QueueStats{Queue: name, Counts: map[string]map[jobs.State]int64{}})
		}
		qs := &s.Queues[i]
		if t, ok := qd.Lookup("oldestAvailable").TimeOK(); ok && (qs.OldestAvailable.IsZero() || t.Before(qs.OldestAvailable)) {
			qs.OldestAvailable = t.UTC()
		}
		for _, cv := range arrayValues(qd.Lookup("counts"), &s.Unreadable) {
			cd, ok := cv.DocumentOK()
			kind, okKind := cd.Lookup("kind").StringValueOK()
			state, okState := cd.Lookup("state").StringValueOK()
			n, okN := cd.Lookup("n").AsInt64OK()
			if !ok || !okKind || !okState || !okN || n < 0 {
				s.Unreadable++
				continue
			}
			if qs.Counts[kind] == nil {
				qs.Counts[kind] = map[jobs.State]int64{}
			}
			qs.Counts[kind][jobs.State(state)] += n
		}
	}
}

// readFinished adds the jobs finished per state and minute of v, the
// stored finished array, within the window before s.CountedAt; entries it
// cannot read are counted in s.Unreadable.
func (s *StoredStats) readFinished(v bson.RawValue) {
	since := finishedSince(s.CountedAt)
	for _, fv := range arrayValues(v, &s.Unreadable) {
		fd, ok := fv.DocumentOK()
		state, okState := fd.Lookup("state").StringValueOK()
		minute, okMinute := fd.Lookup("minute").TimeOK()
		n, okN := fd.Lookup("n").AsInt64OK()
		if !ok || !okState || !okMinute || !okN || n < 0 {
			s.Unreadable++
			continue
		}
		if minute.Before(since) || minute.After(s.CountedAt) {
			continue // outside the window: not the chart's
		}
		st := jobs.State(state)
		if s.Finished[st] == nil {
			s.Finished[st] = map[time.Time]int64{}
		}
		s.Finished[st][minute.UTC().Truncate(time.Minute)] += n
	}
}

// arrayValues returns the elements of v when it is an array; a value of
// another type counts as one unreadable entry, a missing one as none.
func arrayValues(v bson.RawValue, unreadable *int) []bson.RawValue {
	if v.Type == 0 {
		return nil
	}
	arr, ok := v.ArrayOK()
	if !ok {
		*unreadable++
		return nil
	}
	vals, err := arr.Values()
	if err != nil {
		*unreadable++
		return nil
	}
	return vals
}
