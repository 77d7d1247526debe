package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// syncBuffer collects a process's output while it runs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is a running docket process.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

func workerBinary(t *testing.T) string {
	return testdb.BuildBinary(t, "github.com/docketq/docket/cmd/internal/testworker", true)
}

func enqueueBinary(t *testing.T) string {
	return testdb.BuildBinary(t, "github.com/docketq/docket/cmd/enqueue", true)
}

// fastWorker are flags for a worker that notices a dead peer in seconds.
var fastWorker = []string{
	"--lease", "2s", "--heartbeat-interval", "300ms", "--reap-interval", "1s", "--reap-grace", "1ms",
	"--poll-max", "200ms", "--retry-base", "50ms", "--retry-max", "200ms", "--log-format", "json", "--leader-ttl", "3s",
}

// startWorker starts a worker process on db's database.
func startWorker(t *testing.T, db *mongo.Database, name string, args ...string) *proc {
	t.Helper()
	return startProc(t, workerBinary(t), db, name, nil, args...)
}

func startProc(t *testing.T, bin string, db *mongo.Database, name string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DOCKET_MONGO_URI="+testdb.URI(), "DOCKET_DB="+db.Name())
	cmd.Env = append(cmd.Env, env...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	p := &proc{t: t, name: name, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("output of %s:\n%s", name, tail(out.String(), 60))
		}
	})
	return p
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(sig), "signal %s to %s", sig, p.name)
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		p.t.Fatalf("%s did not exit within %s; output:\n%s", p.name, d, tail(p.out.String(), 40))
	}
	return p.cmd.ProcessState.ExitCode()
}

// waitLog waits until the process has logged a line containing s.
func (p *proc) waitLog(s string, d time.Duration) {
	p.t.Helper()
	require.Eventually(p.t, func() bool { return strings.Contains(p.out.String(), s) }, d, 20*time.Millisecond,
		"%s never logged %q; output:\n%s", p.name, s, tail(p.out.String(), 40))
}

// workerID returns the id the worker process logged at start.
func (p *proc) workerID() string {
	p.t.Helper()
	p.waitLog(`"worker started"`, 60*time.Second)
	for _, line := range strings.Split(p.out.String(), "\n") {
		if strings.Contains(line, `"worker started"`) {
			var m map[string]any
			require.NoError(p.t, bson.UnmarshalExtJSON([]byte(line), false, &m))
			return m["worker"].(string)
		}
	}
	p.t.Fatal("no worker id")
	return ""
}

// run runs a command to completion and returns its output and exit code.
func run(t *testing.T, bin string, db *mongo.Database, env []string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DOCKET_MONGO_URI="+testdb.URI())
	if db != nil {
		cmd.Env = append(cmd.Env, "DOCKET_DB="+db.Name())
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Stdin = strings.NewReader(stdin)
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("run %s: %v", bin, err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

func newQueue(t *testing.T, db *mongo.Database) *queue.Client {
	t.Helper()
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	must(t, "create the jobs indexes", func() error { return q.EnsureIndexes(context.Background()) })
	return q
}

// waitJob polls until the job satisfies ok.
func waitJob(t *testing.T, q *queue.Client, id string, d time.Duration, what string, ok func(*jobs.Job) bool) *jobs.Job {
	t.Helper()
	var j *jobs.Job
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := q.Get(context.Background(), id)
		if !assert.NoError(c, err) {
			return
		}
		j = got
		assert.True(c, ok(j), "job %s: never %s (last: %+v)", id, what, j)
	}, d, 50*time.Millisecond)
	return j
}

func inState(s jobs.State) func(*jobs.Job) bool {
	return func(j *jobs.Job) bool { return j.State == s }
}

// executions returns the recorded executions per job id: one per attempt
// that started its handler (internal/testworker records each attempt
// once, its _id the job's id and the claim's token).
func executions(t *testing.T, db *mongo.Database) map[string][]bson.M {
	t.Helper()
	var out map[string][]bson.M
	must(t, "read the executions", func() (err error) { out, err = readExecutions(db); return err })
	return out
}

// readExecutions is executions, returning the read's error.
func readExecutions(db *mongo.Database) (map[string][]bson.M, error) {
	var all []bson.M
	if err := readAll(db.Collection("executions"), bson.M{}, &all); err != nil {
		return nil, err
	}
	out := map[string][]bson.M{}
	for _, e := range all {
		id := fmt.Sprint(e["jobId"])
		out[id] = append(out[id], e)
	}
	return out, nil
}

// killMidJob SIGKILLs the worker process (one of workers, by worker id)
// that runs a job of kind whose handler has started (written its
// execution), and returns that job's id. A job running in the database may
// also be one claimed ahead, not started, which the kill would leave run
// only once; and a handler may end, and its completion land, between the
// read and the kill (a loaded machine takes that long): the victim is a
// job still running once its worker is dead and its last writes have
// landed, else another worker's job is. It never kills the last worker,
// and removes those it killed from workers.
func killMidJob(t *testing.T, db *mongo.Database, kind string, workers map[string]*proc) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if id, ok := killOneMidJob(t, db, kind, workers); ok {
			return id
		}
	}
	t.Fatalf("no worker ran a %s job whose handler had started, within a minute", kind)
	return ""
}

// killOneMidJob is one try of killMidJob: it reports whether it killed a
// worker whose job is still running once its last writes have landed.
func killOneMidJob(t *testing.T, db *mongo.Database, kind string, workers map[string]*proc) (string, bool) {
	t.Helper()
	var running []jobs.Job
	if readAll(db.Collection("jobs"), bson.M{"kind": kind, "state": "running"}, &running) != nil {
		return "", false
	}
	started, err := readExecutions(db)
	if err != nil {
		return "", false
	}
	for _, j := range running {
		if workers[j.Owner] == nil || len(started[j.ID]) == 0 || len(workers) == 1 {
			continue
		}
		workers[j.Owner].signal(syscall.SIGKILL)
		workers[j.Owner].wait(10 * time.Second)
		delete(workers, j.Owner)
		time.Sleep(500 * time.Millisecond) // a write sent before the kill lands
		var after jobs.Job
		must(t, "read job "+j.ID, func() error {
			err := db.Collection("jobs").FindOne(context.Background(), bson.M{"_id": j.ID}).Decode(&after)
			if errors.Is(err, mongo.ErrNoDocuments) {
				return nil
			}
			return err
		})
		if after.State == jobs.StateRunning && after.Owner == j.Owner {
			return j.ID, true
		}
		t.Logf("job %s finished before its worker was killed; killing another", j.ID)
		return "", false
	}
	return "", false
}
