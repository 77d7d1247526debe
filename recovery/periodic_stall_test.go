package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap/zaptest"
)

// runPeriodicJobs claims and completes every runnable job of q, and
// returns how many times each id ran.
func runPeriodicJobs(t *testing.T, q *queue.Client, ran map[string]int) {
	t.Helper()
	ctx := context.Background()
	for {
		j, err := store.Of(q).Claim(ctx, store.ClaimParams{
			Owner: "runner", Queues: []string{jobs.DefaultQueue}, Kinds: []string{"noop"}, Lease: time.Minute,
		})
		require.NoError(t, err)
		if j == nil {
			return
		}
		ran[j.ID]++
		require.NoError(t, store.Of(q).Complete(ctx, store.LeaseOf(j)))
	}
}

// stallAt returns a step hook that stalls the first time the pass reaches
// step, until resume is closed, having closed reached.
func stallAt(step string) (hook func(context.Context, string) error, reached, resume chan struct{}) {
	reached, resume = make(chan struct{}), make(chan struct{})
	var once sync.Once
	return func(_ context.Context, s string) error {
		if s == step {
			once.Do(func() {
				close(reached)
				<-resume
			})
		}
		return nil
	}, reached, resume
}

// TestPeriodicStalledLeaderAfterPurgeRunsTheTickOnce: a leader takes tick T
// and stalls before its insert reaches the server; the next leader enqueues
// the pending tick, the job runs, succeeds and is purged; the stalled
// leader resumes. Its late insert must not make T run a second time, by a
// purge (an operator's) or by retention (succeededRetention).
func TestPeriodicStalledLeaderAfterPurgeRunsTheTickOnce(t *testing.T) {
	t.Parallel()
	for _, gone := range []string{"purge", "retention"} {
		t.Run(gone, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			spec := recovery.PeriodicJob{Name: "tick", Schedule: "@every 1s", Kind: "noop"}
			db, q, stalled, clock := periodicSetup(t, spec)
			next, err := recovery.NewPeriodicEnqueuer(db, q, []recovery.PeriodicJob{spec}, zaptest.NewLogger(t))
			require.NoError(t, err)
			next.SetNow(clock.now)
			_, err = stalled.RunOnce(ctx)
			require.NoError(t, err)
			start := clock.now()
			clock.add(time.Second)
			tick := recovery.PeriodicJobID("tick", start.Add(time.Second))

			hook, reached, resume := stallAt("periodic:take")
			stalled.SetStep(hook)
			done := make(chan error, 1)
			go func() {
				_, err := stalled.RunOnce(ctx)
				done <- err
			}()
			<-reached
			n, err := next.RunOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n, "the next leader enqueues the pending tick")
			ran := map[string]int{}
			runPeriodicJobs(t, q, ran)
			require.Equal(t, map[string]int{tick: 1}, ran)
			time.Sleep(2 * time.Millisecond) // finishedAt strictly before the cutoff
			switch gone {
			case "purge":
				purged, err := q.Purge(ctx, jobs.StateSucceeded, 0)
				require.NoError(t, err)
				require.EqualValues(t, 1, purged)
			case "retention":
				cleaned, err := store.Of(q).Clean(ctx, jobs.StateSucceeded, 0, 100)
				require.NoError(t, err)
				require.Equal(t, 1, cleaned)
			}

			close(resume)
			require.NoError(t, <-done)
			for range 3 { // and the passes after it
				_, err := stalled.RunOnce(ctx)
				require.NoError(t, err)
				_, err = next.RunOnce(ctx)
				require.NoError(t, err)
			}
			runPeriodicJobs(t, q, ran)
			require.Equal(t, map[string]int{tick: 1}, ran, "tick %s ran %d times", tick, ran[tick])
			left := periodicJobs(t, q)
			ids := make([]string, len(left))
			for i, j := range left {
				ids[i] = fmt.Sprintf("%s (%s)", j.ID, j.State)
			}
			require.Empty(t, ids, "jobs left over")
			var st bson.M
			require.NoError(t, db.Collection(recovery.DefaultPeriodicCollection).FindOne(ctx, bson.D{{Key: "_id", Value: "tick"}}).Decode(&st))
			require.NotContains(t, st, "pending")
		})
	}
}

// TestPeriodicSweepsAHeldJobItsWriterLeft: the stalled leader of the test
// above resumes and dies right after its late insert, before it can see
// that its tick was finished long ago and remove what it inserted. The job
// it left is held (never runnable), and the sweep of held jobs removes it.
func TestPeriodicSweepsAHeldJobItsWriterLeft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	spec := recovery.PeriodicJob{Name: "tick", Schedule: "@every 1s", Kind: "noop"}
	db, q, stalled, clock := periodicSetup(t, spec)
	next, err := recovery.NewPeriodicEnqueuer(db, q, []recovery.PeriodicJob{spec}, zaptest.NewLogger(t))
	require.NoError(t, err)
	next.SetNow(clock.now)
	_, err = stalled.RunOnce(ctx)
	require.NoError(t, err)
	clock.add(time.Second)

	died := errors.New("died")
	hook, reached, resume := stallAt("periodic:take")
	stalled.SetStep(func(ctx context.Context, s string) error {
		if s == "periodic:insert" {
			return died
		}
		return hook(ctx, s)
	})
	done := make(chan error, 1)
	go func() {
		_, err := stalled.RunOnce(ctx)
		done <- err
	}()
	<-reached
	_, err = next.RunOnce(ctx)
	require.NoError(t, err)
	ran := map[string]int{}
	runPeriodicJobs(t, q, ran)
	_, err = q.Purge(ctx, jobs.StateSucceeded, -time.Hour)
	require.NoError(t, err)
	close(resume)
	require.ErrorIs(t, <-done, died)

	left := periodicJobs(t, q)
	require.Len(t, left, 1, "the late insert landed")
	require.Equal(t, jobs.StateAvailable, left[0].State)
	require.True(t, left[0].RunAt.After(time.Now().AddDate(1000, 0, 0)), "held: never due")
	runPeriodicJobs(t, q, ran)
	require.Len(t, ran, 1)
	for _, n := range ran {
		require.Equal(t, 1, n)
	}
	n, err := next.SweepOrphans(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Empty(t, periodicJobs(t, q))
}
