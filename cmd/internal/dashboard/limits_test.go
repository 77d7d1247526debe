package dashboard_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/docketq/docket/cmd/internal/dashboard"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestFlowControlInABrowser: the overview lists the concurrency and rate
// limits with their use (running / limit, partitions running full, burst
// used, the next start),
// says which bind, counts the jobs waiting on each, and shows names and
// problems another app wrote as text, never as markup.
func TestFlowControlInABrowser(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	// "mail" jobs of queue mail: 3 waiting an hour, 1 running. Add 4
	// runnable ones, under a limit of 1 and a spent rate.
	for i := range 4 {
		_, err := b.q.Enqueue(b.ctx, "mail", bson.M{"i": i}, queue.InsertOpts{Queue: "mail"})
		require.NoError(t, err)
	}
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("mail"), 1, "test"))
	require.NoError(t, b.q.SetRate(b.ctx, queue.QueueLimit("mail"), queue.Rate{N: 2, Per: time.Hour, Burst: 2}, "test"))
	_, err := store.Of(b.q).ClaimBatch(b.ctx, store.ClaimParams{Owner: "w", Queues: []string{"reports"}, Kinds: []string{"mail"}, Lease: time.Minute}, 1)
	require.NoError(t, err)
	evil := `<img src=x onerror="window.pwned=1">`
	require.NoError(t, b.q.SetPartitionLimit(b.ctx, queue.KindLimit("report"), evil, 2, "test"))
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("digest"), queue.Rate{N: 1, Per: time.Hour, Burst: 1, By: "customerId"}, "test"))
	_, err = b.db.Collection(store.DefaultLimitsCollection).InsertMany(b.ctx, []any{
		bson.M{"_id": "rate:kind:" + evil, "rate": 1, "periodMs": 1000, "burst": 1},
		bson.M{"_id": "rate:queue:reports", "rate": evil, "periodMs": 1000, "burst": 1},
	})
	require.NoError(t, err)
	// Spend the rate of queue mail, as claims of other processes would.
	_, err = b.db.Collection(store.DefaultLimitsCollection).UpdateOne(b.ctx, bson.M{"_id": "rate:queue:mail"},
		bson.M{"$set": bson.M{"tat": time.Now().Add(2 * time.Hour)}, "$inc": bson.M{"starts": 5}})
	require.NoError(t, err)

	br := startBrowser(t)
	br.open(b.srv.URL + "/")
	row := func(name string) string { return br.text(fmt.Sprintf(`#limits tr[data-limit="%s"]`, name)) }
	require.Contains(t, row("kind:mail"), "1 / 1 running binding")
	require.Contains(t, row("kind:report"), "0 running; 2 per "+evil+": 0 of 0 partitions running full")
	require.Contains(t, row("kind:mail"), "concurrency")
	require.Contains(t, row("kind:digest"), "per customerId: 0 of 0 partitions spent, 0 started")
	require.Regexp(t, `queue:mail\s+rate\s+2/h burst 2: 2 / 2 of the burst used, 5 started binding\s+in 1h\d+m\d+s`, row("queue:mail"))
	require.Contains(t, row("queue:reports"), "malformed: limits nothing (rate is string")
	require.Contains(t, br.text("#limits"), "kind:"+evil)
	require.Equal(t, "4", br.text(`#limits tr[data-limit="kind:mail"] td.waiting`), "the 4 runnable mail jobs")
	require.Equal(t, false, br.script(`return window.pwned === 1`))
	br.screenshot("overview-limits")
}
