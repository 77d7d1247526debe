package recovery_test

import (
	"sync/atomic"
	"testing"

	"github.com/docketq/docket/internal/leadership"
	"github.com/docketq/docket/recovery"
	"github.com/stretchr/testify/require"
)

type fixedLeader struct{ leading atomic.Bool }

func (l *fixedLeader) Leading() (leadership.Term, bool) { return leadership.Term{}, l.leading.Load() }

type countTask struct{ runs atomic.Int32 }

func (c *countTask) Run()             { c.runs.Add(1) }
func (c *countTask) Schedule() string { return "@every 1s" }

func TestLeaderOnlyRunsOnlyWhileLeading(t *testing.T) {
	t.Parallel()
	l := &fixedLeader{}
	task := &countTask{}
	gated := recovery.LeaderOnly(l, task)
	require.Equal(t, "@every 1s", gated.Schedule())
	gated.Run()
	require.Zero(t, task.runs.Load(), "a follower does not run it")
	l.leading.Store(true)
	gated.Run()
	require.EqualValues(t, 1, task.runs.Load())
}
