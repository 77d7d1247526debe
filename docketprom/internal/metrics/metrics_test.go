package metrics_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	"github.com/docketq/docket/docketprom"
	"github.com/docketq/docket/docketprom/internal/metrics"
	"github.com/docketq/docket/internal/leadership"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// scrape GETs url/metrics and parses the Prometheus text it serves.
// scrape reads url's metrics. t may be a test or an EventuallyWithT tick.
func scrape(t require.TestingT, url string) map[string]*dto.MetricFamily {
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// value returns the value of the sample of family name whose labels include
// labels (a counter's, a gauge's, or a histogram's count), summed over the
// samples that match.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	sum, found := 0.0, false
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			ok := false
			for _, l := range m.Label {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					ok = true
				}
			}
			if !ok {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum, found
}

func get(t require.TestingT, url string) (int, string) {
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

type okArgs struct{}

func (okArgs) Kind() string { return "ok" }

type badArgs struct{}

func (badArgs) Kind() string { return "bad" }

// flakyArgs fail their first attempt.
type flakyArgs struct{}

func (flakyArgs) Kind() string { return "flaky" }

// slowArgs outlast a few heartbeats.
type slowArgs struct{}

func (slowArgs) Kind() string { return "slow" }

// stolenArgs have their lease taken while they run, as when the reaper
// re-queues a stalled attempt.
type stolenArgs struct{}

func (stolenArgs) Kind() string { return "stolen" }

// cancelledArgs are cancelled by an operator while they run.
type cancelledArgs struct{}

func (cancelledArgs) Kind() string { return "cancelled" }

// TestMetricsCountTheJobsRun runs a known workload in a worker observed by
// the metrics and checks that what /metrics serves equals what ran: 20 jobs
// succeed, 5 fail permanently (dead), 3 fail once then succeed (retried),
// one outlasts heartbeats (and reports its progress once), one has its
// lease taken and one is cancelled while it runs.
func TestMetricsCountTheJobsRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, q.EnsureIndexes(ctx))

	reg := jobs.NewRegistry()
	require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job, okArgs) error { return nil }, jobs.KindOptions{}))
	require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job, badArgs) error {
		return jobs.Permanent(errors.New("bad on purpose"))
	}, jobs.KindOptions{}))
	require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job, _ flakyArgs) error {
		if j.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}, jobs.KindOptions{}))
	require.NoError(t, jobs.Register(reg, func(ctx context.Context, _ *jobs.Job, _ slowArgs) error {
		if err := jobs.Progress(ctx, 0.5, "sleeping"); err != nil { // written by the next renewal, once
			return err
		}
		time.Sleep(700 * time.Millisecond) // past the 200 ms heartbeat ticks: at least one renewal
		return nil
	}, jobs.KindOptions{}))
	require.NoError(t, jobs.Register(reg, func(ctx context.Context, j *jobs.Job, _ stolenArgs) error {
		_, err := db.Collection("jobs").UpdateOne(ctx, bson.D{{Key: "_id", Value: j.ID}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "leaseToken", Value: "another attempt's"}}}})
		if err != nil {
			return err
		}
		<-ctx.Done() // the next heartbeat finds the lease taken
		return context.Cause(ctx)
	}, jobs.KindOptions{}))
	require.NoError(t, jobs.Register(reg, func(ctx context.Context, j *jobs.Job, _ cancelledArgs) error {
		if _, err := q.Cancel(ctx, j.ID); err != nil {
			return err
		}
		<-ctx.Done() // the next heartbeat tells the worker
		return context.Cause(ctx)
	}, jobs.KindOptions{}))

	registry := prometheus.NewRegistry()
	m, err := metrics.NewWorker(registry)
	require.NoError(t, err)
	srv := httptest.NewServer(docketprom.Handler(registry, docketprom.NewHealth(func(context.Context) error { return nil }, 0)))
	defer srv.Close()

	var inserts []queue.Insert
	add := func(n int, args jobs.Args) {
		for range n {
			inserts = append(inserts, queue.Insert{Kind: args.Kind(), Args: args})
		}
	}
	add(20, okArgs{})
	add(5, badArgs{})
	add(3, flakyArgs{})
	add(1, slowArgs{})
	add(1, stolenArgs{})
	add(1, cancelledArgs{})
	_, err = q.EnqueueMany(ctx, inserts)
	require.NoError(t, err)

	w, err := worker.New(q, reg, worker.Config{
		Concurrency: 4, ClaimBatch: 1, Lease: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
		PollMin: 5 * time.Millisecond, PollMax: 50 * time.Millisecond,
		Logger: zaptest.NewLogger(t), Observer: m,
	})
	require.NoError(t, err)
	w.Start(ctx)
	defer func() { _ = w.StopAndCancel(ctx) }()

	// 34 attempts: 31 jobs, and the flaky ones' second attempts.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, _ := value(scrape(c, srv.URL), "docket_jobs_finished_total")
		assert.EqualValues(c, 34, n)
	}, 60*time.Second, 50*time.Millisecond)
	require.NoError(t, w.Stop(ctx))
	fams := scrape(t, srv.URL)

	for _, c := range []struct {
		kind, outcome string
		want          float64
	}{
		{"ok", "succeeded", 20},
		{"bad", "dead", 5},
		{"flaky", "retried", 3},
		{"flaky", "succeeded", 3},
		{"slow", "succeeded", 1},
		{"stolen", "lease_lost", 1},
		{"cancelled", "cancelled", 1},
	} {
		got, _ := value(fams, "docket_jobs_finished_total", "kind", c.kind, "queue", "default", "outcome", c.outcome)
		require.Equal(t, c.want, got, "docket_jobs_finished_total{kind=%q,outcome=%q}", c.kind, c.outcome)
	}
	for kind, want := range map[string]float64{"ok": 20, "bad": 5, "flaky": 6, "slow": 1, "stolen": 1, "cancelled": 1} {
		got, _ := value(fams, "docket_job_duration_seconds", "kind", kind)
		require.Equal(t, want, got, "handler durations observed for %s", kind)
		running, _ := value(fams, "docket_jobs_running", "kind", kind)
		require.Zero(t, running, "jobs of kind %s running after the stop", kind)
	}
	// The database agrees with the counters.
	for state, want := range map[jobs.State]int64{jobs.StateSucceeded: 24, jobs.StateDead: 5, jobs.StateCancelled: 1, jobs.StateRunning: 1} {
		n, err := db.Collection("jobs").CountDocuments(ctx, bson.D{{Key: "state", Value: state}})
		require.NoError(t, err)
		require.Equal(t, want, n, "jobs %s in the database", state)
	}

	retries, _ := value(fams, "docket_job_retries_total", "kind", "flaky")
	require.Equal(t, 3.0, retries, "second attempts of the flaky jobs")
	claimed, _ := value(fams, "docket_jobs_claimed_total")
	require.Equal(t, 34.0, claimed)
	claims, _ := value(fams, "docket_claim_duration_seconds")
	empty, _ := value(fams, "docket_claims_empty_total")
	claimErrors, _ := value(fams, "docket_claim_errors_total")
	require.Equal(t, claims, claimed+empty+claimErrors, "with claimBatch 1, every claim returned one job, none, or failed")
	require.Positive(t, empty, "the worker polled an empty queue at the end")
	lost, _ := value(fams, "docket_leases_lost_total", "kind", "stolen")
	require.Equal(t, 1.0, lost)
	lostAll, _ := value(fams, "docket_leases_lost_total")
	require.Equal(t, 1.0, lostAll)
	hbLost, _ := value(fams, "docket_heartbeats_total", "result", "lease_lost")
	require.Equal(t, 1.0, hbLost)
	renewed, _ := value(fams, "docket_heartbeats_total", "result", "renewed")
	require.GreaterOrEqual(t, renewed, 2.0, "the slow job's and the cancelled job's renewals at least")
	progress, _ := value(fams, "docket_progress_writes_total", "kind", "slow")
	require.Equal(t, 1.0, progress, "the slow job's one report, written once")
	progressAll, _ := value(fams, "docket_progress_writes_total")
	require.Equal(t, 1.0, progressAll)
}

// TestReadyzFollowsTheDatabaseAndShutdown: /healthz answers 200 while the
// process lives; /readyz answers 503 while the database is unreachable or
// the setup not done, 200 then,
// 503 while the database is stopped, 200 once it is back, and 503 for good
// once the process is shutting down.
func TestReadyzFollowsTheDatabaseAndShutdown(t *testing.T) {
	testdb.SkipOnRealMongo(t, "stops and restarts a devdb of its own")
	t.Parallel()
	d := testdb.StartDevDB(t, "")
	client, err := mongo.Connect(options.Client().ApplyURI(d.URI()).SetServerSelectionTimeout(time.Second))
	require.NoError(t, err)
	defer func() { _ = client.Disconnect(context.Background()) }()
	h := docketprom.NewHealth(func(ctx context.Context) error { return client.Ping(ctx, readpref.Primary()) }, 0)
	srv := httptest.NewServer(docketprom.Handler(prometheus.NewRegistry(), h))
	defer srv.Close()

	requireProbe := func(path string, code int, body string) {
		t.Helper()
		got, b := get(t, srv.URL+path)
		require.Equal(t, code, got, "%s: %s", path, b)
		require.Contains(t, b, body, path)
	}
	eventuallyProbe := func(path string, code int, body string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got, b := get(c, srv.URL+path)
			assert.Equal(c, code, got, "%s: %s", path, b)
			assert.Contains(c, b, body, path)
		}, 30*time.Second, 50*time.Millisecond, path)
	}

	requireProbe("/healthz", 200, "ok")
	eventuallyProbe("/readyz", 503, "not ready: database setup (indexes) not done yet")
	h.SetUp()
	eventuallyProbe("/readyz", 200, "ok")

	d.Stop()
	start := time.Now()
	requireProbe("/readyz", 503, "not ready: database not reachable")
	require.Less(t, time.Since(start), 5*time.Second, "the ping is bounded")
	requireProbe("/healthz", 200, "ok")

	d.Restart()
	eventuallyProbe("/readyz", 200, "ok")

	h.ShuttingDown()
	requireProbe("/readyz", 503, "not ready: shutting down")
	requireProbe("/healthz", 200, "ok")
}

// TestQueueGaugesComeFromTheLeaderOnly: of two processes' QueueStats, only
// the elected leader's exports the jobs per queue and state, and its values
// are the database's; so a sum across processes is the count. When the
// leader resigns, the other takes over and exports them instead.
func TestQueueGaugesComeFromTheLeaderOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	require.NoError(t, q.EnsureIndexes(ctx))

	var inserts []queue.Insert
	for range 3 {
		inserts = append(inserts, queue.Insert{Kind: "ok", Args: okArgs{}})
	}
	inserts = append(inserts, queue.Insert{Kind: "ok", Args: okArgs{}, Opts: queue.InsertOpts{Queue: "mail"}})
	inserts = append(inserts, queue.Insert{Kind: "ok", Args: okArgs{}, Opts: queue.InsertOpts{Queue: "mail", RunAt: time.Now().Add(time.Hour)}})
	_, err = q.EnqueueMany(ctx, inserts)
	require.NoError(t, err)
	// One dead job, as a worker would leave it.
	_, err = db.Collection("jobs").UpdateOne(ctx, bson.D{{Key: "queue", Value: "default"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: jobs.StateDead}}}})
	require.NoError(t, err)

	type proc struct {
		url  string
		stop context.CancelFunc
		done chan struct{}
	}
	procs := make([]*proc, 2)
	for i := range procs {
		el, err := leadership.New(db.Collection(leadership.DefaultCollection), leadership.Config{
			ID: []string{"p0", "p1"}[i], TTL: 3 * time.Second, Logger: zaptest.NewLogger(t),
		})
		require.NoError(t, err)
		qs, err := metrics.NewQueueStats(metrics.QueueStatsConfig{
			Queue: q, Leader: el, Changes: el.Changes(), Interval: 100 * time.Millisecond, Logger: zaptest.NewLogger(t),
		})
		require.NoError(t, err)
		reg := prometheus.NewRegistry()
		reg.MustRegister(qs)
		srv := httptest.NewServer(docketprom.Handler(reg, docketprom.NewHealth(func(context.Context) error { return nil }, 0)))
		t.Cleanup(srv.Close)
		runCtx, stop := context.WithCancel(ctx)
		p := &proc{url: srv.URL, stop: stop, done: make(chan struct{})}
		go func() {
			defer close(p.done)
			elected := make(chan struct{})
			go func() { defer close(elected); el.Run(runCtx) }()
			qs.Run(runCtx)
			<-elected // the elector logs its resignation: before the test ends
		}()
		t.Cleanup(func() { stop(); <-p.done })
		procs[i] = p
	}

	// exporting returns the processes that export the queue gauges.
	exporting := func() []int {
		var out []int
		for i, p := range procs {
			if _, ok := value(scrape(t, p.url), "docket_jobs"); ok {
				out = append(out, i)
			}
		}
		return out
	}
	var leader int
	require.Eventually(t, func() bool {
		e := exporting()
		if len(e) == 1 {
			leader = e[0]
		}
		return len(e) == 1
	}, 30*time.Second, 50*time.Millisecond)

	fams := scrape(t, procs[leader].url)
	want := map[[2]string]float64{
		{"default", "available"}: 2, {"default", "dead"}: 1, {"default", "running"}: 0, {"default", "succeeded"}: 0, {"default", "cancelled"}: 0,
		{"mail", "available"}: 2, {"mail", "dead"}: 0, {"mail", "running"}: 0, {"mail", "succeeded"}: 0, {"mail", "cancelled"}: 0,
	}
	got := map[[2]string]float64{}
	for _, m := range fams["docket_jobs"].Metric {
		var key [2]string
		for _, l := range m.Label {
			switch l.GetName() {
			case "queue":
				key[0] = l.GetValue()
			case "state":
				key[1] = l.GetValue()
			}
		}
		got[key] = m.Gauge.GetValue()
	}
	require.Equal(t, want, got)
	// Both queues have a due job waiting; the one due in an hour does not count.
	for _, queue := range []string{"default", "mail"} {
		age, ok := value(fams, "docket_oldest_available_job_age_seconds", "queue", queue)
		require.True(t, ok, queue)
		require.Greater(t, age, 0.0, queue)
		require.Less(t, age, 120.0, queue)
	}
	leading, _ := value(fams, "docket_leader")
	require.Equal(t, 1.0, leading)
	other := scrape(t, procs[1-leader].url)
	leading, _ = value(other, "docket_leader")
	require.Equal(t, 0.0, leading)
	_, ok := value(other, "docket_oldest_available_job_age_seconds")
	require.False(t, ok, "a follower exports no queue gauge")

	// The leader stops (and resigns): the other takes over the gauges.
	procs[leader].stop()
	<-procs[leader].done
	require.Eventually(t, func() bool {
		e := exporting()
		sort.Ints(e)
		return len(e) == 1 && e[0] == 1-leader
	}, 30*time.Second, 50*time.Millisecond)
}

// termLeader leads in one fixed term.
type termLeader struct{ term leadership.Term }

func (l termLeader) Leading() (leadership.Term, bool) { return l.term, true }

// TestQueueGaugesReuseTheLeadersStoredCounts: the counts this process
// stored as the leader of its current term (the maintenance's count) are
// exported as they are, not counted again; counts stored in another term
// are not trusted, and the jobs are counted.
func TestQueueGaugesReuseTheLeadersStoredCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, "ok", bson.M{}, queue.InsertOpts{})
	require.NoError(t, err)
	term := leadership.Term{Number: 4, Token: "mine"}
	stored := queue.StoredStats{CountedAt: store.Of(q).ServerTime(ctx), By: "p0", Term: 4, TermToken: "mine", Every: time.Minute,
		Queues: []queue.QueueStats{{Queue: "default", Counts: map[string]map[jobs.State]int64{"ok": {"available": 42}}}}}
	ok, err := q.StoreStats(ctx, stored)
	require.NoError(t, err)
	require.True(t, ok)

	gauge := func(l termLeader) float64 {
		qs, err := metrics.NewQueueStats(metrics.QueueStatsConfig{Queue: q, Leader: l, Interval: time.Hour, Logger: zaptest.NewLogger(t)})
		require.NoError(t, err)
		reg := prometheus.NewRegistry()
		reg.MustRegister(qs)
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); qs.Run(runCtx) }()
		defer func() { stop(); <-done }()
		srv := httptest.NewServer(docketprom.Handler(reg, docketprom.NewHealth(func(context.Context) error { return nil }, 0)))
		defer srv.Close()
		var v float64
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			for _, f := range scrape(c, srv.URL) {
				if f.GetName() != "docket_jobs" {
					continue
				}
				for _, m := range f.GetMetric() {
					labels := map[string]string{}
					for _, l := range m.GetLabel() {
						labels[l.GetName()] = l.GetValue()
					}
					if labels["queue"] == "default" && labels["state"] == "available" {
						v = m.GetGauge().GetValue()
						return
					}
				}
			}
			c.Errorf("no docket_jobs sample for the default queue's available jobs yet")
		}, 30*time.Second, 20*time.Millisecond)
		return v
	}
	require.EqualValues(t, 42, gauge(termLeader{term}), "this term's stored counts are exported")
	require.EqualValues(t, 1, gauge(termLeader{leadership.Term{Number: 5, Token: "next"}}), "another term's are not: the jobs are counted")
}
