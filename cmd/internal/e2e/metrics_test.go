package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// httpAddr returns the address the worker process logged it serves
// /metrics on.
func (p *proc) httpAddr() string {
	p.t.Helper()
	p.waitLog(`"serving /metrics, /healthz and /readyz"`, 60*time.Second)
	for _, line := range strings.Split(p.out.String(), "\n") {
		if strings.Contains(line, `"serving /metrics, /healthz and /readyz"`) {
			var m map[string]any
			require.NoError(p.t, bson.UnmarshalExtJSON([]byte(line), false, &m))
			return "http://" + m["http_addr"].(string)
		}
	}
	p.t.Fatal("no http address")
	return ""
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func scrapeMetrics(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := scrape(base)
	require.NoError(t, err)
	return fams
}

// scrape reads base's /metrics (scrapeMetrics, returning the error: for
// a condition polled in another goroutine).
func scrape(base string) (map[string]*dto.MetricFamily, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", base, resp.Status)
	}
	var p expfmt.TextParser
	return p.TextToMetricFamilies(resp.Body)
}

// metricSum sums the samples of family name whose labels include labels
// (pairs of name and value): counters, gauges, histograms' counts.
func metricSum(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
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
				ok = ok || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
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

// TestWorkerServesMetricsAndProbes: two worker processes with --http-addr
// run 20 jobs that succeed and 5 that fail permanently; the counters they
// serve, summed over both as Prometheus would, equal the jobs run by
// outcome, and the jobs per queue and state come from exactly one of them,
// the leader, equal to the database's. /healthz answers 200; /readyz 200,
// then 503 on a worker that is shutting down (while it waits for its
// running job) and on one whose database is stopped.
func TestWorkerServesMetricsAndProbes(t *testing.T) {
	t.Parallel()
	d, db, q := ownDevDB(t)
	args := append([]string{"--http-addr", "127.0.0.1:0", "--queue-stats-interval", "200ms", "--concurrency", "4"}, fastWorker...)
	env := []string{"DOCKET_MONGO_URI=" + d.URI(), "DOCKET_MONGO_TIMEOUT=1s"}
	ws := []*proc{
		startProc(t, workerBinary(t), db, "W1", env, args...),
		startProc(t, workerBinary(t), db, "W2", env, args...),
	}
	urls := make([]string, len(ws))
	for i, w := range ws {
		urls[i] = w.httpAddr()
		code, body := httpGet(t, urls[i]+"/healthz")
		require.Equal(t, 200, code, body)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			resp, err := http.Get(urls[i] + "/readyz")
			if assert.NoError(c, err) {
				resp.Body.Close()
				assert.Equal(c, 200, resp.StatusCode, "%s never ready", w.name)
			}
		}, 30*time.Second, 50*time.Millisecond)
	}

	var inserts []queue.Insert
	for range 20 {
		inserts = append(inserts, queue.Insert{Kind: "record", Args: bson.M{}})
	}
	for range 5 {
		inserts = append(inserts, queue.Insert{Kind: "record", Args: bson.M{"failAttempts": 1}, Opts: queue.InsertOpts{MaxAttempts: 1}})
	}
	enqueueMany(t, q, inserts)

	sumOf := func(c *assert.CollectT, name string, labels ...string) float64 {
		total := 0.0
		for _, u := range urls {
			fams, err := scrape(u)
			assert.NoError(c, err)
			v, _ := metricSum(fams, name, labels...)
			total += v
		}
		return total
	}
	sum := func(name string, labels ...string) float64 {
		total := 0.0
		for _, u := range urls {
			v, _ := metricSum(scrapeMetrics(t, u), name, labels...)
			total += v
		}
		return total
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 25.0, sumOf(c, "docket_jobs_finished_total"), "the workers never counted 25 finished attempts")
	}, 2*time.Minute, 100*time.Millisecond)
	require.Equal(t, 20.0, sum("docket_jobs_finished_total", "kind", "record", "queue", "default", "outcome", "succeeded"))
	require.Equal(t, 5.0, sum("docket_jobs_finished_total", "kind", "record", "queue", "default", "outcome", "dead"))
	require.Equal(t, 25.0, sum("docket_job_duration_seconds", "kind", "record"))
	// A job claimed ahead of a free handler and given back unstarted (the
	// lease of the claim about to lapse: devdb's --elections) is claimed
	// again: a claim each time.
	unstarted := 0
	for _, w := range ws {
		unstarted += countLines(w.out.String(), "gave back a job claimed ahead and not started")
	}
	require.Equal(t, float64(25+unstarted), sum("docket_jobs_claimed_total"), "claims: 25 and %d given back unstarted", unstarted)
	require.Zero(t, sum("docket_jobs_running"))
	require.Zero(t, sum("docket_leases_lost_total"))
	for state, want := range map[jobs.State]int64{jobs.StateSucceeded: 20, jobs.StateDead: 5} {
		require.Equal(t, want, count(t, db.Collection("jobs"), bson.D{{Key: "state", Value: state}}), "jobs %s in the database", state)
	}

	// The queue gauges: from the leader alone, equal to the database's.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		exporting := 0
		for _, u := range urls {
			fams, err := scrape(u)
			assert.NoError(c, err)
			if _, ok := metricSum(fams, "docket_jobs"); ok {
				exporting++
			}
		}
		assert.Equal(c, 1, exporting, "processes exporting the queue gauges")
		assert.Equal(c, 20.0, sumOf(c, "docket_jobs", "queue", "default", "state", "succeeded"))
		assert.Equal(c, 5.0, sumOf(c, "docket_jobs", "queue", "default", "state", "dead"))
		assert.Equal(c, 0.0, sumOf(c, "docket_jobs", "queue", "default", "state", "available"))
	}, time.Minute, 100*time.Millisecond, "the leader's queue gauges never matched the database")
	require.Equal(t, 1.0, sum("docket_leader"))

	// A worker shutting down is not ready while it waits for its job.
	long := enqueue(t, q, "record", bson.M{"sleepMs": 60000}, queue.InsertOpts{})
	j := waitJob(t, q, long.ID, time.Minute, "running", inState(jobs.StateRunning))
	holder, other := 0, 1
	if ws[1].workerID() == j.Owner {
		holder, other = 1, 0
	}
	require.Equal(t, ws[holder].workerID(), j.Owner)
	// Claimed is not started: a job claimed ahead of its handler is given
	// back at once by a stop (seen once under load). Wait for its start.
	ws[holder].waitLog(`"job started","worker":"`+j.Owner+`","job_id":"`+long.ID+`"`, 30*time.Second)
	ws[holder].signal(syscall.SIGTERM)
	ws[holder].waitLog("stopping: waiting for running jobs", 30*time.Second)
	code, body := httpGet(t, urls[holder]+"/readyz")
	require.Equal(t, 503, code)
	require.Equal(t, "not ready: shutting down\n", body)
	code, _ = httpGet(t, urls[holder]+"/healthz")
	require.Equal(t, 200, code, "a process shutting down is still alive")
	ws[holder].signal(syscall.SIGTERM) // stop at once: the job is released
	require.Equal(t, 0, ws[holder].wait(time.Minute))

	// The other one, with its database stopped, is alive but not ready.
	d.Stop()
	code, body = httpGet(t, urls[other]+"/readyz")
	require.Equal(t, 503, code)
	require.Equal(t, "not ready: database not reachable\n", body)
	code, _ = httpGet(t, urls[other]+"/healthz")
	require.Equal(t, 200, code)
}
