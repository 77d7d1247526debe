package dashboard_test

import (
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/cmd/internal/dashboard"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestOverviewShowsJobsNoLiveWorkerServes: the overview says when no
// worker is alive; with workers alive it lists the waiting jobs whose kind
// none serves on their queue (escaped, linked to the jobs list) with the
// kinds they do serve, and marks their rows; once a worker serves them the
// section and the marks are gone.
func TestOverviewShowsJobsNoLiveWorkerServes(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{}) // three available jobs of kind mail on queue mail
	_, err := b.q.Enqueue(b.ctx, "<b>k</b>", bson.M{}, queue.InsertOpts{Queue: "mail"})
	require.NoError(t, err)
	beat := func(id string, queues, kinds []string) {
		require.NoError(t, b.q.Beat(b.ctx, queue.WorkerInfo{ID: id, Queues: queues, Kinds: kinds, StartedAt: time.Now(), BeatEvery: time.Minute}))
	}

	code, body := b.get(t, "/")
	require.Equal(t, 200, code)
	require.Contains(t, body, `<p id="unserved">No worker process is alive: 4 waiting jobs wait until one that serves their kind starts.</p>`)
	require.NotContains(t, body, `id="unserved-kinds"`, "no list of every kind when no worker is alive")

	beat("w1", []string{"default"}, []string{"mail"})
	code, body = b.get(t, "/")
	require.Equal(t, 200, code)
	require.Contains(t, body, `<p id="unserved">4 waiting jobs are of kinds no live worker serves on their queue`)
	require.Contains(t, body, "Live workers serve the kind mail.")
	require.Contains(t, body, `<tr><td>mail</td><td><a href="/jobs?kind=mail&amp;queue=mail&amp;state=available">mail</a></td><td class="num">3</td></tr>`)
	require.Contains(t, body, `<td>mail</td><td><a href="/jobs?kind=%3Cb%3Ek%3C%2Fb%3E&amp;queue=mail&amp;state=available">&lt;b&gt;k&lt;/b&gt;</a></td><td class="num">1</td>`)
	require.NotContains(t, body, "<b>k</b>")
	require.Equal(t, 2, strings.Count(body, `class="state dead unserved"`), "both rows of queue mail are marked")

	beat("w2", []string{"mail"}, []string{"mail", "<b>k</b>"})
	code, body = b.get(t, "/")
	require.Equal(t, 200, code)
	require.NotContains(t, body, `id="unserved"`)
	require.NotContains(t, body, `class="state dead unserved"`)
}
