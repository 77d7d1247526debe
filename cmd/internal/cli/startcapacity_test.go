package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
)

// lockedBuffer is a bytes.Buffer that workers running at once can share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// capacitiesOf returns the stored capacity of each bounded queue of q.
func capacitiesOf(t *testing.T, q *queue.Client) map[string]int {
	t.Helper()
	caps, err := q.QueueCapacities(context.Background())
	require.NoError(t, err)
	got := map[string]int{}
	for _, c := range caps {
		require.Empty(t, c.Malformed, c.Queue)
		got[c.Queue] = c.Capacity
	}
	return got
}

// TestWorkerStartAppliesConfiguredCapacities: workers started at once with
// one config file that names capacities set them, without conflict, before
// they report started; a worker whose config names none changes nothing;
// a queue the file does not name keeps the capacity docketctl set, and one
// it names gets the file's value over docketctl's (the last writer wins).
//
// The workers run in this process (the worker command's own code), and
// stop on the SIGTERM this test sends itself, so it does not run in
// parallel with other tests.
func TestWorkerStartAppliesConfiguredCapacities(t *testing.T) {
	db := testdb.NewDB(t)
	uri := testdb.URI()
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	for _, set := range [][]string{{"mail", "9"}, {"orders", "2"}} {
		_, errs, code := runCtl(t, uri, db, "capacity", set[0], set[1])
		require.Zero(t, code, errs)
	}

	dir := t.TempDir()
	withCaps := filepath.Join(dir, "caps.yaml")
	require.NoError(t, os.WriteFile(withCaps, []byte("capacities:\n  orders: 5\n  bulk: 3\n"), 0o600))
	without := filepath.Join(dir, "plain.yaml")
	require.NoError(t, os.WriteFile(without, []byte("worker:\n  concurrency: 2\n"), 0o600))

	out := &lockedBuffer{}
	var started sync.WaitGroup
	codes := make(chan int, 3)
	for _, config := range []string{withCaps, withCaps, without} {
		started.Add(1)
		go func() {
			codes <- WorkerWith([]string{"--config", config, "--mongo-uri", uri, "--db", db.Name(), "--queues", "x",
				"--log-format", "console", "--poll-max", "100ms"}, out, out, WorkerOptions{
				Register: func(reg *jobs.Registry, _ *mongo.Database, _ *queue.Client, _ *zap.Logger) error {
					return reg.Add("noop", jobs.HandlerFunc(func(context.Context, *jobs.Job) error { return nil }), jobs.KindOptions{})
				},
				Started: started.Done,
			})
		}()
	}
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	select {
	case <-all:
	case code := <-codes:
		t.Fatalf("a worker exited with %d before starting:\n%s", code, out)
	case <-time.After(60 * time.Second):
		t.Fatalf("the workers did not start:\n%s", out)
	}
	require.Equal(t, map[string]int{"orders": 5, "bulk": 3, "mail": 9}, capacitiesOf(t, q), "log:\n%s", out)
	caps, err := q.QueueCapacities(context.Background())
	require.NoError(t, err)
	for _, c := range caps {
		if c.Queue != "mail" {
			require.Regexp(t, `^config:`, c.SetBy, "set by a worker's configuration")
		}
	}

	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGTERM))
	for range 3 {
		select {
		case code := <-codes:
			require.Zero(t, code, "log:\n%s", out)
		case <-time.After(60 * time.Second):
			t.Fatalf("the workers did not stop:\n%s", out)
		}
	}
}
