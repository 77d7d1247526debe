package queue_test

import (
	"testing"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

// TestServed: a kind is served on a queue when one live process lists
// both; processes not alive serve nothing; Unserved counts the available
// jobs of the pairs no live process serves, and nothing else.
func TestServed(t *testing.T) {
	t.Parallel()
	s := queue.NewServed([]queue.WorkerInfo{
		{ID: "a", Alive: true, Queues: []string{"default", "mail"}, Kinds: []string{"noop"}},
		{ID: "b", Alive: true, Queues: []string{"mail"}, Kinds: []string{"send_email"}},
		{ID: "stopped", Queues: []string{"default"}, Kinds: []string{"send_email", "report"}},
	})
	require.Equal(t, 2, s.Alive)
	require.True(t, s.Serves("mail", "send_email"))
	require.False(t, s.Serves("default", "send_email"), "served on mail only")
	require.False(t, s.Serves("default", "report"), "only a stopped process lists it")
	require.Equal(t, []string{"noop", "send_email"}, s.Kinds())
	require.Equal(t, []string{"default", "mail"}, s.Queues("noop"))

	stats := []queue.QueueStats{
		{Queue: "mail", Counts: map[string]map[jobs.State]int64{
			"send_email": {jobs.StateAvailable: 4},
			"send_emial": {jobs.StateAvailable: 2, jobs.StateRunning: 1, jobs.StateDead: 5},
		}},
		{Queue: "default", Counts: map[string]map[jobs.State]int64{
			"send_email": {jobs.StateAvailable: 1},
			"report":     {jobs.StateBlocked: 3, jobs.StateSucceeded: 9},
		}},
	}
	require.Equal(t, []queue.UnservedJobs{
		{Queue: "default", Kind: "send_email", Waiting: 1},
		{Queue: "mail", Kind: "send_emial", Waiting: 2},
	}, s.Unserved(stats))
	require.Zero(t, queue.NewServed(nil).Alive)
	require.Len(t, queue.NewServed(nil).Unserved(stats), 3)
}
