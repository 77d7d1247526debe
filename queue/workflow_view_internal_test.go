package queue

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTopoOrder: parents before dependents, ties by creation (a job
// without a createdAt last, then by id), and a cycle, which only another
// application can write, still lists every job once.
func TestTopoOrder(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	task := func(id string, sec int, after ...string) WorkflowTask {
		w := WorkflowTask{JobSummary: JobSummary{ID: id, JobID: StringJobID(id)}}
		for _, p := range after {
			w.After = append(w.After, StringJobID(p))
		}
		if sec >= 0 {
			w.CreatedAt = t0.Add(time.Duration(sec) * time.Second)
		}
		return w
	}
	for _, tc := range []struct {
		name  string
		tasks []WorkflowTask
		want  []string
	}{
		{"a child created before its parent", []WorkflowTask{task("child", 1, "parent"), task("parent", 2)}, []string{"parent", "child"}},
		{"diamond", []WorkflowTask{task("d", 4, "b", "c"), task("c", 2, "a"), task("b", 3, "a"), task("a", 1)}, []string{"a", "c", "b", "d"}},
		{"ties by id", []WorkflowTask{task("y", 1), task("x", 1)}, []string{"x", "y"}},
		{"no createdAt last", []WorkflowTask{task("old", -1), task("new", 5)}, []string{"new", "old"}},
		{"a parent outside the view", []WorkflowTask{task("b", 2, "gone"), task("a", 1)}, []string{"a", "b"}},
		{"a cycle", []WorkflowTask{task("p", 1, "q"), task("q", 2, "p"), task("r", 3, "q")}, []string{"p", "q", "r"}},
		{"itself and twice", []WorkflowTask{task("s", 1, "s", "t", "t"), task("t", 2)}, []string{"t", "s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, w := range topoOrder(tc.tasks) {
				got = append(got, w.ID)
			}
			require.Equal(t, tc.want, got)
		})
	}
}
