package docket

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

type fixedPool struct{ id string }

func (p fixedPool) ID() string   { return p.id }
func (p fixedPool) Running() int { return 0 }

// TestRegistryBeatsEveryTenSecondsAtMost: a client beats in the
// registry at its heartbeat interval, but at most every 10 s (the default
// heartbeat interval), not 5 s, so an idle process's registry costs one
// write per 10 s; listings still drop a dead one within WorkerMissedBeats
// beats, 30 s.
func TestRegistryBeatsEveryTenSecondsAtMost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		heartbeat time.Duration // 0: the default
		want      time.Duration
	}{
		{0, 10 * time.Second},
		{2 * time.Second, 2 * time.Second},
		{time.Minute, 10 * time.Second},
	} {
		t.Run(tc.heartbeat.String(), func(t *testing.T) {
			t.Parallel()
			q, err := queue.New(testdb.NewDB(t), queue.Config{})
			require.NoError(t, err)
			wcfg := worker.Config{HeartbeatInterval: tc.heartbeat}.WithDefaults()
			unregister := register(q, wcfg, fixedPool{"w-" + tc.heartbeat.String()}, []string{"noop"}, zaptest.NewLogger(t))
			defer unregister()
			var got []queue.WorkerInfo
			require.Eventually(t, func() bool {
				got, err = q.Workers(context.Background(), 0, false)
				return err == nil && len(got) == 1
			}, 10*time.Second, 20*time.Millisecond, "the process registers at once")
			require.Equal(t, tc.want, got[0].BeatEvery)
			require.True(t, got[0].Alive)
		})
	}
}

// TestEmbeddedClientIsInTheRegistry: every started client beats in the
// workers registry, not only the worker command, so the dashboard's
// Workers page and docketctl workers list an embedded one, with its
// process limits (one named with a '.', which is no field name every
// server takes, among them), and the reaper knows it alive; Stop takes it
// out.
func TestEmbeddedClientIsInTheRegistry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limits := map[string]int{KindLimit("registry-test"): 2, QueueLimit("mail"): 1, KindLimit("email.send"): 4}
	c, err := NewClient(testdb.NewDB(t), Config{Logger: zaptest.NewLogger(t), ID: "embedded-1", Queues: []string{"mail"}, Concurrency: 3,
		ProcessLimits: limits})
	require.NoError(t, err)
	require.NoError(t, AddHandler(c, func(context.Context, *jobs.Job, registryArgs) error { return nil }, jobs.KindOptions{}))
	require.NoError(t, c.Start(ctx))
	var got []queue.WorkerInfo
	require.Eventually(t, func() bool {
		got, err = c.Workers(ctx, nil)
		return err == nil && len(got) == 1
	}, 10*time.Second, 20*time.Millisecond, "a started client registers at once")
	require.Equal(t, "embedded-1", got[0].ID)
	require.Equal(t, []string{"mail"}, got[0].Queues)
	require.Equal(t, []string{"registry-test"}, got[0].Kinds)
	require.EqualValues(t, 3, got[0].Concurrency)
	require.Equal(t, map[string]int{"kind:registry-test": 2, "queue:mail": 1, "kind:email.send": 4}, got[0].ProcessLimits)
	require.True(t, got[0].Alive)

	require.NoError(t, c.Stop(ctx))
	got, err = c.Workers(ctx, &WorkersParams{All: true})
	require.NoError(t, err)
	require.Empty(t, got, "a stopped client leaves the registry")
}

type registryArgs struct{}

func (registryArgs) Kind() string { return "registry-test" }

func (registryArgs) InsertOpts() InsertOpts { return InsertOpts{Queue: "mail"} }
