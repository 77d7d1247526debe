package cli

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket/configs"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

type fixedPool struct{ id string }

func (p fixedPool) ID() string   { return p.id }
func (p fixedPool) Running() int { return 0 }

// TestRegistryBeatsEveryTenSecondsAtMost: a worker process beats in the
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
			cfg := configs.Config{}
			cfg.Worker.HeartbeatInterval = tc.heartbeat
			cfg = cfg.WithDefaults()
			unregister := register(q, cfg, fixedPool{"w-" + tc.heartbeat.String()}, []string{"noop"}, zaptest.NewLogger(t))
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
