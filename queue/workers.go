package queue

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/docketq/docket/internal/store"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The registry of live worker processes: each process upserts a document
// {_id: worker id, host, pid, version, queues, kinds, concurrency,
// running, processLimits, startedAt, lastSeen, beatEveryMs} at its
// heartbeat interval, at most every 10 s (docket worker's
// registryBeatMax), and deletes it when it stops cleanly. lastSeen is the
// server's clock ($currentDate), and a listing compares it with the
// server's clock too (hello's localTime), so no clock is compared across
// machines. A process that stopped beating (killed, stalled, cut off)
// drops out of the listing once it has missed WorkerMissedBeats beats; its
// document is deleted by a listing once it is workerForgetAfter old. (A
// TTL index on lastSeen could expire them on MongoDB; a listing deleting
// them works on every server docket runs on, some of which have no TTL
// indexes: server.go in internal/store.)

// DefaultWorkersCollection ("workers") is the collection of the registry,
// beside the default jobs collection. A Client on another jobs collection
// C uses C_workers.
const DefaultWorkersCollection = store.DefaultWorkersCollection

// WorkerMissedBeats (3) is how many beats a process may miss before
// listings leave it out, and the reaper stops sparing its expired jobs.
const WorkerMissedBeats = store.WorkerMissedBeats

// workerForgetAfter is how long after its last beat a process's document
// is deleted.
const workerForgetAfter = time.Hour

// WorkerInfo is one worker process as the registry holds it.
type WorkerInfo struct {
	ID          string
	Host        string
	PID         int64
	Version     string
	Queues      []string
	Kinds       []string
	Concurrency int64
	// Running is how many jobs the process was running at its last beat.
	Running int64
	// ProcessLimits are the process's own limits (its Config.ProcessLimits:
	// limit name → the most jobs of it the process holds at once), stored
	// as {processLimits: [{name, n}, ...]} for people to read; no process
	// reads them back to enforce them. A name is a value, not a field
	// name, so any name is stored as it is ("kind:email.send" among
	// them: a '.' is not a field name every server takes). Listed as
	// stored, what cannot be read left out; nil when there are none.
	ProcessLimits map[string]int
	StartedAt     time.Time
	// LastSeen is the server's time of the last beat.
	LastSeen time.Time
	// BeatEvery is how often the process beats.
	BeatEvery time.Duration
	// Age is how long ago, on the server's clock, the last beat was;
	// negative when LastSeen is ahead of it.
	Age time.Duration
	// Alive reports whether the process has missed fewer than
	// WorkerMissedBeats beats (or beat within the listing's ttl), its
	// LastSeen no more than 5 s ahead of the server's clock.
	Alive bool
	// Future reports a LastSeen more than 5 s ahead of the server's clock
	// (which it reads as lastSeen is written): not a beat docket wrote.
	Future bool
}

// Beat records that the worker process w is alive, as it is now. Only
// w's own document is written; any number of beats may race.
func (c *Client) Beat(ctx context.Context, w WorkerInfo) error {
	if w.ID == "" {
		return fmt.Errorf("queue: worker beat: the worker id is empty")
	}
	// Always arrays, empty ones for none, so that a reader finds one type;
	// limits in name order, so that a process's beats write the same one.
	queues, kinds, limits := append([]string{}, w.Queues...), append([]string{}, w.Kinds...), bson.A{}
	for _, name := range slices.Sorted(maps.Keys(w.ProcessLimits)) {
		limits = append(limits, bson.D{{Key: "name", Value: name}, {Key: "n", Value: w.ProcessLimits[name]}})
	}
	_, err := c.st.WorkersColl().UpdateOne(ctx, bson.D{{Key: "_id", Value: w.ID}}, bson.D{
		{Key: "$set", Value: bson.D{
			{Key: "host", Value: w.Host}, {Key: "pid", Value: w.PID}, {Key: "version", Value: w.Version},
			{Key: "queues", Value: queues}, {Key: "kinds", Value: kinds}, {Key: "concurrency", Value: w.Concurrency},
			{Key: "running", Value: w.Running}, {Key: "processLimits", Value: limits}, {Key: "startedAt", Value: w.StartedAt.UTC()},
			{Key: "beatEveryMs", Value: w.BeatEvery.Milliseconds()},
		}},
		{Key: "$currentDate", Value: bson.D{{Key: "lastSeen", Value: true}}},
	}, options.UpdateOne().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("queue: worker beat: %w", err)
	}
	return nil
}

// Unregister deletes the document of worker id: the process has stopped.
func (c *Client) Unregister(ctx context.Context, id string) error {
	if _, err := c.st.WorkersColl().DeleteOne(ctx, bson.D{{Key: "_id", Value: id}}); err != nil {
		return fmt.Errorf("queue: unregister worker %s: %w", id, err)
	}
	return nil
}

// Workers lists the registered worker processes, in host and id order:
// with all false only those alive, that is seen within ttl, or when ttl is
// 0 within WorkerMissedBeats of their own beat interval, and not stamped
// more than store.WorkerClockSkew ahead of the server's clock. It also deletes
// the documents of processes not seen for workerForgetAfter (an hour).
func (c *Client) Workers(ctx context.Context, ttl time.Duration, all bool) ([]WorkerInfo, error) {
	t := c.st.ServerTime(ctx)
	if _, err := c.st.WorkersColl().DeleteMany(ctx, bson.D{{Key: "lastSeen", Value: bson.D{{Key: "$lt", Value: t.Add(-workerForgetAfter)}}}}); err != nil {
		return nil, fmt.Errorf("queue: forget stopped workers: %w", err)
	}
	return c.listWorkers(ctx, t, ttl, all)
}

// listWorkers reads the registry as Workers lists it at the server's time
// t, writing nothing.
func (c *Client) listWorkers(ctx context.Context, t time.Time, ttl time.Duration, all bool) ([]WorkerInfo, error) {
	cur, err := c.st.WorkersColl().Find(ctx, bson.D{})
	if err != nil {
		return nil, fmt.Errorf("queue: list workers: %w", err)
	}
	var out []WorkerInfo
	err = store.EachRaw(ctx, cur, func(d bson.Raw) error {
		w := workerInfo(d)
		limit := ttl
		if limit <= 0 {
			limit = store.AliveFor(w.BeatEvery)
		}
		if !w.LastSeen.IsZero() {
			w.Age = t.Sub(w.LastSeen)
			w.Future = w.Age < -store.WorkerClockSkew
			w.Alive = w.Age < limit && !w.Future
		}
		if all || w.Alive {
			out = append(out, w)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: list workers: %w", err)
	}
	slices.SortFunc(out, func(a, b WorkerInfo) int { return cmp.Or(strings.Compare(a.Host, b.Host), strings.Compare(a.ID, b.ID)) })
	return out, nil
}

// workerInfo reads a registry document field by field: one another
// application wrote is listed with what can be read.
func workerInfo(d bson.Raw) WorkerInfo {
	var w WorkerInfo
	if id, ok := d.Lookup("_id").StringValueOK(); ok {
		w.ID = id
	} else {
		w.ID = d.Lookup("_id").String()
	}
	w.Host, _ = d.Lookup("host").StringValueOK()
	w.PID, _ = d.Lookup("pid").AsInt64OK()
	w.Version, _ = d.Lookup("version").StringValueOK()
	strs := func(field string) []string {
		var out []string
		if a, ok := d.Lookup(field).ArrayOK(); ok {
			vals, _ := a.Values()
			for _, v := range vals {
				if s, ok := v.StringValueOK(); ok {
					out = append(out, s)
				}
			}
		}
		return out
	}
	w.Queues, w.Kinds = strs("queues"), strs("kinds")
	w.Concurrency, _ = d.Lookup("concurrency").AsInt64OK()
	w.Running, _ = d.Lookup("running").AsInt64OK()
	w.ProcessLimits = processLimits(d.Lookup("processLimits"))
	if t, ok := d.Lookup("startedAt").TimeOK(); ok {
		w.StartedAt = t.UTC()
	}
	w.LastSeen, w.BeatEvery = store.LastBeat(d)
	return w
}

// processLimits reads a registry document's processLimits, [{name, n}]:
// each name a string as stored, with a whole number from 1 to MaxLimit,
// the range a worker accepts. Anything else (not an array, an element
// that is not a document, a name that is not a string, a value of
// another type, a fraction, a number out of range, a name listed twice
// after the first) is left out, never an error: another application may
// have written it. nil when none is read.
func processLimits(v bson.RawValue) map[string]int {
	a, ok := v.ArrayOK()
	if !ok {
		return nil
	}
	vals, _ := a.Values() // none when its bytes are malformed
	var out map[string]int
	for _, e := range vals {
		d, ok := e.DocumentOK()
		if !ok {
			continue
		}
		name, ok := d.Lookup("name").StringValueOK()
		if !ok {
			continue
		}
		n, malformed := store.StoredCount(d, "n", MaxLimit)
		if malformed != "" || n < 1 {
			continue
		}
		if _, dup := out[name]; dup {
			continue
		}
		if out == nil {
			out = map[string]int{}
		}
		out[name] = int(n)
	}
	return out
}
