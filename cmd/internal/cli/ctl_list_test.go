package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestListPagesPastIDsOfOtherTypes: `list --after` with the token each
// page prints reaches every job, with a foreign job whose _id is 7 or an
// ObjectId among docket's UUID ids (issue 21 item 6: the page after _id 7
// skipped every UUID id); a malformed token is bad input. Each row starts
// with its job's token (a UUID id is its own).
func TestListPagesPastIDsOfOtherTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	want := map[string]bool{}
	for range 3 {
		res, err := q.Enqueue(ctx, "k", bson.M{}, queue.InsertOpts{Queue: "q"})
		require.NoError(t, err)
		want[res.ID] = true
	}
	_, err = db.Collection(queue.DefaultCollection).InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: 7}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "q"}, {Key: "state", Value: "dead"}},
		bson.D{{Key: "_id", Value: bson.ObjectID{1}}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "q"}, {Key: "state", Value: "dead"}},
	})
	require.NoError(t, err)
	want["@EAcAAAA"] = true            // 7
	want["@BwEAAAAAAAAAAAAAAA"] = true // ObjectId 010000000000000000000000

	more := regexp.MustCompile(`(?m)^more: --after (\S+)$`)
	got := map[string]bool{}
	args := []string{"list", "--limit", "1"}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10, "paging does not end")
		out, errs, code := runCtl(t, testdb.URI(), db, args...)
		require.Zero(t, code, errs)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 2, out)
		got[strings.Fields(lines[1])[0]] = true
		m := more.FindStringSubmatch(errs)
		if m == nil {
			break
		}
		args = []string{"list", "--limit", "1", "--after", m[1]}
	}
	require.Equal(t, want, got)

	_, errs, code := runCtl(t, testdb.URI(), db, "list", "--after", "@!")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "--after: ")
	require.Contains(t, errs, "not a job id")
}
