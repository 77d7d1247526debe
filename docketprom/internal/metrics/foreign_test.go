package metrics_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/docketprom"
	"github.com/docketq/docket/docketprom/internal/metrics"
	"github.com/docketq/docket/internal/leadership"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// leaderStats returns a server exporting the queue gauges of q from a
// process that leads, counted once: once it exports the metric named.
func leaderStats(t *testing.T, q *queue.Client, metric string) string {
	t.Helper()
	qs, err := metrics.NewQueueStats(metrics.QueueStatsConfig{Queue: q, Leader: termLeader{leadership.Term{Number: 1, Token: "t"}}, Interval: time.Hour})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	reg.MustRegister(qs)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); qs.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	srv := httptest.NewServer(docketprom.Handler(reg, docketprom.NewHealth(func(context.Context) error { return nil }, 0)))
	t.Cleanup(srv.Close)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, ok := value(scrape(c, srv.URL), metric)
		assert.True(c, ok, "no %s sample yet", metric)
	}, 30*time.Second, 20*time.Millisecond)
	return srv.URL
}

// TestQueueNameNotUTF8DoesNotCrashTheLeader: counts holding a queue name
// that is not UTF-8, as MongoDB hands back a job another application wrote
// with {queue: "mail\xff"}, are exported under an escaped label: the scrape
// answers and parses, and the process lives (MustNewConstMetric panicked
// in the registry's gather goroutine, which killed the process). So does a
// job of such a kind and queue in a worker's own metrics.
func TestQueueNameNotUTF8DoesNotCrashTheLeader(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	term := leadership.Term{Number: 1, Token: "t"}
	qs, err := metrics.NewQueueStats(metrics.QueueStatsConfig{Queue: q, Leader: termLeader{term}, Interval: time.Hour})
	require.NoError(t, err)
	qs.SetCounts(term, []queue.QueueStats{
		{Queue: "mail\xff", Counts: map[string]map[jobs.State]int64{"k": {"available": 2}}, OldestAvailable: time.Now().Add(-time.Minute)},
		{Queue: "mail", Counts: map[string]map[jobs.State]int64{"k\xfe": {"dead": 1, "st\xfd": 4}}},
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(qs)
	pool, err := metrics.NewWorker(reg)
	require.NoError(t, err)
	job := &jobs.Job{Kind: "k\xfe", Queue: "mail\xff", Attempt: 2}
	pool.Started(job)
	pool.LeaseLost(job)
	pool.Finished(job, worker.Outcome("odd\xff"), time.Second)
	srv := httptest.NewServer(docketprom.Handler(reg, docketprom.NewHealth(func(context.Context) error { return nil }, 0)))
	t.Cleanup(srv.Close)

	got := scrape(t, srv.URL)
	n, ok := value(got, "docket_jobs", "queue", `"mail\xff"`, "state", "available")
	require.True(t, ok, "the queue that is not UTF-8 is exported escaped: %v", got["docket_jobs"])
	require.EqualValues(t, 2, n)
	age, _ := value(got, "docket_oldest_available_job_age_seconds", "queue", `"mail\xff"`)
	require.Greater(t, age, 30.0)
	n, _ = value(got, "docket_jobs", "queue", "mail", "state", metrics.OtherState)
	require.EqualValues(t, 4, n, "a state that is none of docket's is summed under (other)")
	n, _ = value(got, "docket_jobs_finished_total", "kind", `"k\xfe"`, "queue", `"mail\xff"`, "outcome", `"odd\xff"`)
	require.EqualValues(t, 1, n)
	n, _ = value(got, "docket_leases_lost_total", "kind", `"k\xfe"`, "queue", `"mail\xff"`)
	require.EqualValues(t, 1, n)
	code, _ := get(t, srv.URL+"/healthz")
	require.Equal(t, 200, code)
}

// TestForeignQueueNameDoesNotCrashTheLeader: jobs another application
// wrote into the database, with names that are not UTF-8 (devdb stores
// U+FFFD for them), an escape sequence or a state of their own, are
// exported escaped, from the database's counts.
func TestForeignQueueNameDoesNotCrashTheLeader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	_, err = db.Collection(queue.DefaultCollection).InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "a"}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "mail\xff"}, {Key: "state", Value: "available"}, {Key: "runAt", Value: time.Now()}},
		bson.D{{Key: "_id", Value: "b"}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "t\x1b]0;owned\x07"}, {Key: "state", Value: "weird\xfe"}},
	})
	require.NoError(t, err)
	url := leaderStats(t, q, "docket_jobs")
	got := scrape(t, url)
	var names []string
	for _, m := range got["docket_jobs"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "queue" && strings.HasPrefix(l.GetValue(), "mail") {
				names = append(names, l.GetValue())
			}
		}
	}
	require.NotEmpty(t, names, "the job of queue mail\\xff is counted")
	n, ok := value(got, "docket_jobs", "queue", `"t\x1b]0;owned\a"`, "state", metrics.OtherState)
	require.True(t, ok, "a control character is escaped, a foreign state summed under (other)")
	require.EqualValues(t, 1, n)
	code, _ := get(t, url+"/healthz")
	require.Equal(t, 200, code)
}

// TestForeignQueuesAreBounded: 2,000 queue names from another application
// make at most MaxQueues+1 queue labels per metric: the largest queues by
// name, the rest summed under (other), the total unchanged.
func TestForeignQueuesAreBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	docs := make([]any, 0, 2003)
	for i := range 2000 {
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprint(i)}, {Key: "kind", Value: "k"}, {Key: "queue", Value: fmt.Sprintf("q%04d", i)}, {Key: "state", Value: "available"}})
	}
	for i := range 3 { // the largest queue
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprint("big", i)}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "zbig"}, {Key: "state", Value: "dead"}})
	}
	_, err = db.Collection(queue.DefaultCollection).InsertMany(ctx, docs)
	require.NoError(t, err)
	got := scrape(t, leaderStats(t, q, "docket_jobs"))
	for _, name := range []string{"docket_jobs", "docket_oldest_available_job_age_seconds", "docket_jobs_unserved"} {
		queues := map[string]bool{}
		for _, m := range got[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" {
					queues[l.GetValue()] = true
				}
			}
		}
		require.Equal(t, metrics.DefaultMaxQueues+1, len(queues), name)
		require.True(t, queues[metrics.OtherQueues], name)
		require.True(t, queues["zbig"], "the largest queue is exported by name")
	}
	require.LessOrEqual(t, len(got["docket_jobs"].GetMetric()), (metrics.DefaultMaxQueues+1)*5)
	total, _ := value(got, "docket_jobs")
	require.EqualValues(t, 2003, total)
	dead, _ := value(got, "docket_jobs", "queue", "zbig", "state", "dead")
	require.EqualValues(t, 3, dead)
	other, _ := value(got, "docket_jobs", "queue", metrics.OtherQueues, "state", "available")
	require.EqualValues(t, 2000-(metrics.DefaultMaxQueues-1), other)
	// No worker is alive: every available job is unserved, summed the same way.
	other, _ = value(got, "docket_jobs_unserved", "queue", metrics.OtherQueues)
	require.EqualValues(t, 2000-(metrics.DefaultMaxQueues-1), other)
	big, ok := value(got, "docket_jobs_unserved", "queue", "zbig")
	require.True(t, ok)
	require.Zero(t, big, "dead jobs wait for nothing")
}
