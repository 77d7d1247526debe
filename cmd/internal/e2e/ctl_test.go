package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func ctlBinary(t *testing.T) string {
	return testdb.BuildBinary(t, "github.com/docketq/docket/cmd/docketctl", true)
}

// setState moves job id to state s by hand, as a worker would have.
func setState(t *testing.T, q *queue.Client, id string, set bson.D) {
	t.Helper()
	must(t, "set job "+id, func() error {
		_, err := store.Of(q).Collection().UpdateOne(context.Background(), bson.M{"_id": id}, bson.D{{Key: "$set", Value: set}})
		return err
	})
}

func jobState(t *testing.T, q *queue.Client, id string) jobs.State {
	t.Helper()
	var j *jobs.Job
	must(t, "read job "+id, func() (err error) { j, err = q.Get(context.Background(), id); return err })
	return j.State
}

// TestDocketctl: an operator finds a dead job, reads why it died, retries
// it, and a worker runs it; running jobs are never touched; bad input exits
// 2 naming what is wrong.
func TestDocketctl(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q := newQueue(t, db)
	ctx := context.Background()
	bin := ctlBinary(t)
	op := &operator{t: t, bin: bin, db: db}
	ctl := op.run

	ids := make([]string, 6)
	for i := range ids {
		ids[i] = enqueue(t, q, "record", bson.M{"i": i}, queue.InsertOpts{Queue: "mail", UniqueKey: map[bool]string{true: "uk"}[i == 0]}).ID
	}
	past := time.Now().Add(-48 * time.Hour)
	setState(t, q, ids[0], bson.D{{Key: "state", Value: "dead"}, {Key: "attempt", Value: 25}, {Key: "finishedAt", Value: past},
		{Key: "errors", Value: bson.A{bson.M{"attempt": 25, "at": past, "owner": "w1", "message": "smtp: connection refused"}}}})
	must(t, "finish the dead job's unique key", func() error {
		_, err := store.Of(q).Collection().UpdateOne(ctx, bson.M{"_id": ids[0]}, bson.M{"$rename": bson.M{"uniqueKey": "finishedUniqueKey"}})
		return err
	})
	setState(t, q, ids[1], bson.D{{Key: "state", Value: "running"}, {Key: "leaseToken", Value: "t"}, {Key: "attempt", Value: 1}})
	setState(t, q, ids[2], bson.D{{Key: "state", Value: "succeeded"}, {Key: "finishedAt", Value: past}})
	setState(t, q, ids[3], bson.D{{Key: "state", Value: "succeeded"}, {Key: "finishedAt", Value: time.Now()}})
	setState(t, q, ids[4], bson.D{{Key: "runAt", Value: time.Now().Add(time.Hour)}}) // waits: no worker takes it

	out, stderr, code := ctl("stats")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `mail\s+record\s+2\s+1\s+2\s+1\s+0`, out)

	out, stderr, code = ctl("list", "--state", "dead")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, ids[0])
	require.Contains(t, out, "smtp: connection refused")
	require.NotContains(t, out, ids[1])

	out, stderr, code = ctl("list", "--queue", "mail", "--limit", "2")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, 2, strings.Count(out, "record"), "the first page holds 2: %s", out)
	require.Contains(t, stderr, "more: --after ")
	next := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(stderr), "more: --after "))
	out2, _, code := ctl("list", "--queue", "mail", "--limit", "10", "--after", next)
	require.Equal(t, 0, code)
	require.Equal(t, 4, strings.Count(out2, "record"), "the second page holds the rest: %s", out2)

	out, stderr, code = ctl("show", ids[0])
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "attempt 25 at")
	require.Contains(t, out, "by w1: smtp: connection refused")

	// Retry: the dead job runs again, its errors kept; the running one is
	// left alone, and says why.
	out, stderr, code = ctl("retry", ids[0], ids[1])
	require.Equal(t, 2, code, stderr)
	if !op.resent { // else the first run's retry, its reply lost, is read below
		require.Contains(t, out, ids[0]+"\tretried (was dead)")
	}
	require.Contains(t, out, ids[1]+"\tnot retried: job is running")
	var j *jobs.Job
	must(t, "read the retried job", func() (err error) { j, err = q.Get(ctx, ids[0]); return err })
	require.Equal(t, jobs.StateAvailable, j.State)
	require.Zero(t, j.Attempt)
	require.Len(t, j.Errors, 1, "past errors are kept")
	require.Equal(t, "uk", j.UniqueKey, "its unique key is back")
	require.Equal(t, jobs.StateRunning, jobState(t, q, ids[1]))

	// Retention off: this test ages jobs by hand, and purges them itself.
	w := startWorker(t, db, "worker", append(fastWorker, "--queues", "mail", "--succeeded-retention", "-1s")...)
	waitJob(t, q, ids[0], time.Minute, "succeeded", inState(jobs.StateSucceeded))

	// Delete: finished only, unless --force; running never.
	out, _, code = ctl("delete", ids[2], ids[4], ids[1], "nope")
	require.Equal(t, 2, code)
	if op.resent {
		require.Zero(t, count(t, store.Of(q).Collection(), bson.M{"_id": ids[2]}), "deleted by the first run")
	} else {
		require.Contains(t, out, ids[2]+"\tdeleted (was succeeded)")
	}
	require.Contains(t, out, "not deleted: job has not finished")
	require.Contains(t, out, ids[1]+"\tnot deleted: job is running")
	require.Contains(t, out, "nope\tnot deleted: job not found")

	old := enqueue(t, q, "record", bson.M{}, queue.InsertOpts{Queue: "archive"})
	setState(t, q, old.ID, bson.D{{Key: "state", Value: "succeeded"}, {Key: "finishedAt", Value: past}})
	out, stderr, code = ctl("purge", "--state", "succeeded", "--older-than", "24h")
	require.Equal(t, 0, code, stderr)
	if !op.resent {
		require.Contains(t, out, "purged 1 succeeded jobs")
	}
	require.Zero(t, count(t, store.Of(q).Collection(), bson.M{"_id": old.ID}), "purged")
	require.EqualValues(t, 1, count(t, store.Of(q).Collection(), bson.M{"_id": ids[3]}), "a job that finished recently is kept")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"retry"}, "give job ids, or a filter"},
		{[]string{"retry", "--state", "running"}, "never retried"},
		{[]string{"list", "--state", "dying"}, `"dying" is not a state`},
		{[]string{"list", "--since", "yesterday"}, "--since"},
		{[]string{"list", "--limit", "0"}, "--limit"},
		{[]string{"purge", "--state", "available", "--older-than", "1h"}, "must be succeeded, dead or cancelled"},
		{[]string{"purge", "--state", "dead"}, "--older-than"},
		{[]string{"show", "nope"}, "no job with id nope"},
		{[]string{"cancel", "nope"}, "job not found"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
	} {
		_, stderr, code := ctl(tc.args...)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.want, "%v", tc.args)
	}
	w.signal(15)
	require.Equal(t, 0, w.wait(time.Minute))
}
