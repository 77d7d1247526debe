package queue_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

// A parent settled on its own whose settle fails does not stop the settles
// of the other parents of the batch: they are settled, it is left due for
// the leader's pass, and the failure is returned.
func TestDepSettleManyGoesOnAfterAFailure(t *testing.T) {
	b := setup(t)
	bad1, bad2 := b.enqueueK(t, queue.InsertOpts{}), b.enqueueK(t, queue.InsertOpts{})
	kid1, kid2 := b.after(t, bad1), b.after(t, bad2)
	b.run(t, bad1, jobs.StateDead)
	b.run(t, bad2, jobs.StateDead)

	require.Error(t, errOf(b.q.SettleDependentsOfAll(queue.WithDepsStep(b.ctx, failFirst(func(context.Context) error {
		return errors.New("the first settle fails")
	})), []string{bad1, bad2})))
	b.requireOneSettled(t, bad1, kid1, bad2, kid2)

	require.NoError(t, errOf(b.q.SettleDependentsOfAll(b.ctx, []string{bad1, bad2})))
	b.requireState(t, jobs.StateCancelled, kid1, kid2)
}

// Each parent settled on its own has a deadline of its own: one whose
// settle hangs (the caller's context has none) ends with its deadline, and
// the next is settled still.
func TestDepSettleManyEachHasItsDeadline(t *testing.T) {
	b := setup(t)
	bad1, bad2 := b.enqueueK(t, queue.InsertOpts{}), b.enqueueK(t, queue.InsertOpts{})
	kid1, kid2 := b.after(t, bad1), b.after(t, bad2)
	b.run(t, bad1, jobs.StateDead)
	b.run(t, bad2, jobs.StateDead)

	require.Error(t, errOf(b.q.SettleDependentsOfAll(queue.WithDepsStep(b.ctx, failFirst(func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})), []string{bad1, bad2})))
	b.requireOneSettled(t, bad1, kid1, bad2, kid2)
}

// failFirst is a settle step hook whose first settle of a dead parent
// ends with fail.
func failFirst(fail func(context.Context) error) func(context.Context, string) error {
	var steps atomic.Int64
	return func(ctx context.Context, step string) error {
		if step == "settle:"+string(jobs.StateDead) && steps.Add(1) == 1 {
			return fail(ctx)
		}
		return nil
	}
}

// requireOneSettled requires that of the dead parents bad1 and bad2 one
// is settled, its kid cancelled, and the other left due.
func (b *bundle) requireOneSettled(t *testing.T, bad1, kid1, bad2, kid2 string) {
	t.Helper()
	// Either parent may be read first: its settle failed, the other's did not.
	due := 0
	for _, p := range []struct{ parent, kid string }{{bad1, kid1}, {bad2, kid2}} {
		if b.get(t, p.parent).Dependents {
			b.requireState(t, jobs.StateCancelled, p.kid)
		} else {
			due++
		}
	}
	require.Equal(t, 1, due, "one parent left due, the other settled")
}

// errOf is the error of a call that also returns what it settled.
func errOf(_ queue.SettleReport, err error) error { return err }
