package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestProcessLimitHoldsInEachWorkerProcess: two worker processes of
// concurrency 4, one given `--process-limits kind:record=2`, the other
// DOCKET_PROCESS_LIMITS=kind:record=2, run 16 record jobs of 300 ms. A
// sampler of the database never sees a process hold more than 2 record
// jobs (claimed or running), sees each hold 2, and every job succeeds.
// Each logs its process limits at start; none is stored, as a
// cluster-wide limit would be.
func TestProcessLimitHoldsInEachWorkerProcess(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	ctx := context.Background()
	ins := make([]queue.Insert, 16)
	for i := range ins {
		ins[i] = queue.Insert{Kind: "record", Args: bson.M{"sleepMs": 300}}
	}
	enqueueMany(t, q, ins)

	var mu sync.Mutex
	most := map[string]int64{} // worker id → record jobs held at once
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			cur, err := db.Collection("jobs").Aggregate(ctx, bson.A{
				bson.M{"$match": bson.M{"kind": "record", "state": "running"}},
				bson.M{"$group": bson.M{"_id": "$owner", "n": bson.M{"$sum": 1}}},
			})
			if err != nil {
				continue
			}
			var rows []struct {
				Owner string `bson:"_id"`
				N     int64  `bson:"n"`
			}
			if cur.All(ctx, &rows) != nil {
				continue
			}
			mu.Lock()
			for _, r := range rows {
				most[r.Owner] = max(most[r.Owner], r.N)
			}
			mu.Unlock()
		}
	}()

	args := append([]string{"--concurrency", "4"}, fastWorker...)
	byFlag := startWorker(t, db, "worker --process-limits", append([]string{"--process-limits", "kind:record=2"}, args...)...)
	byEnv := startProc(t, workerBinary(t), db, "worker DOCKET_PROCESS_LIMITS", []string{"DOCKET_PROCESS_LIMITS=kind:record=2"}, args...)
	ids := []string{byFlag.workerID(), byEnv.workerID()}
	for _, p := range []*proc{byFlag, byEnv} {
		p.waitLog(`"process_limits":{"kind:record":2}`, 10*time.Second)
	}

	require.Eventually(t, func() bool {
		n, err := db.Collection("jobs").CountDocuments(ctx, bson.M{"kind": "record", "state": bson.M{"$ne": "succeeded"}})
		return err == nil && n == 0
	}, 90*time.Second, 50*time.Millisecond, "every job succeeds")
	close(stop)
	sampler.Wait()
	for _, p := range []*proc{byFlag, byEnv} {
		p.signal(syscall.SIGTERM)
		require.Zero(t, p.wait(30*time.Second), "%s exits cleanly", p.name)
	}

	mu.Lock()
	defer mu.Unlock()
	t.Logf("record jobs held at once per worker process: %v", most)
	for i, p := range []*proc{byFlag, byEnv} {
		id, out := ids[i], p.out.String()
		require.Equal(t, 2, mostRunAtOnce(out, "record"), "record jobs %s ran at once: the limit, reached", id)
		// A claim the server applied whose reply the worker did not get
		// (lost, or with a writeConcernError: devdb's --faults) stamps a
		// job with the worker's id until the worker gives it back, never
		// run: the database may show one such lease more per give-back.
		// Likewise a job whose outcome could not be recorded before its
		// lease expired (an election): it shows running under the
		// worker's id, its handler done, until the reaper takes it.
		back := givenBack(out)
		unrecorded := countLines(out, "outcome could not be recorded before the lease expired")
		require.GreaterOrEqual(t, most[id], int64(2), "record jobs %s held at once: the limit, reached", id)
		require.LessOrEqual(t, most[id], int64(2+back+unrecorded), "record jobs %s held at once (%d claims given back, %d outcomes left to the reaper): the limit",
			id, back, unrecorded)
	}
	require.Len(t, most, 2, "held by other owners: %v", most)
	var ls []queue.RunLimit
	must(t, "read the run limits", func() (err error) { ls, err = q.RunLimits(ctx); return err })
	require.Empty(t, ls, "a process limit is not stored")
}

// workerLine is the part of a worker's JSON log line these checks read.
type workerLine struct {
	Msg   string `json:"msg"`
	JobID string `json:"job_id"`
	Kind  string `json:"kind"`
	Jobs  int    `json:"jobs"`
}

// workerLines decodes a worker's JSON log lines, skipping any other.
func workerLines(out string) []workerLine {
	var lines []workerLine
	for _, s := range strings.Split(out, "\n") {
		var l workerLine
		if json.Unmarshal([]byte(s), &l) == nil {
			lines = append(lines, l)
		}
	}
	return lines
}

// mostRunAtOnce is the most handlers of kind a worker ran at once, from
// its "job started" lines and the "job finished…" and "job ended…" lines
// that end each.
func mostRunAtOnce(out, kind string) int {
	running, most := map[string]bool{}, 0
	for _, l := range workerLines(out) {
		switch {
		case l.Kind != kind:
		case l.Msg == "job started":
			running[l.JobID] = true
		case strings.HasPrefix(l.Msg, "job finished"), strings.HasPrefix(l.Msg, "job ended"):
			delete(running, l.JobID)
		}
		most = max(most, len(running))
	}
	return most
}

// givenBack is how many jobs a worker gave back after claims that returned
// an error: stamped with its id by the server, never run (worker/dispatch.go's
// sweepLostClaim).
func givenBack(out string) int {
	n := 0
	for _, l := range workerLines(out) {
		if strings.HasPrefix(l.Msg, "gave back the jobs of a claim that returned an error") {
			n += l.Jobs
		}
	}
	return n
}
