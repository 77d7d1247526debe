package queue_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// oddIDs are ids of every type and shape another application may write
// (those devdb can store: not NaN, a decimal, a symbol, code, MinKey or
// MaxKey), in MongoDB's order of _id values.
func oddIDs() []any {
	return []any{
		nil,
		int64(-3), 2.5, int32(7), int64(9),
		"", ".", "..", "01900000-0000-7000-8000-000000000001", "01900000-0000-7000-8000-000000000002",
		"@at", "VICTIM/delete", "a b", "bad\xff", "invoice?7", "orders/42", "task#3", "100%", "~x",
		bson.D{{Key: "a", Value: 1}},
		bson.Binary{Data: []byte{1, 2}},
		bson.ObjectID{1}, bson.ObjectID{2},
		false, true,
		bson.NewDateTimeFromTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
		bson.Timestamp{T: 1, I: 1},
	}
}

// insertOdd inserts one dead job for each of ids, as another application
// would, and returns their JobIDs in MongoDB's order.
func insertOdd(t *testing.T, b bundle, ids []any) []queue.JobID {
	t.Helper()
	docs := make([]any, len(ids))
	for i, id := range ids {
		docs[i] = bson.D{{Key: "_id", Value: id}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "default"},
			{Key: "state", Value: "dead"}, {Key: "attempt", Value: 3}, {Key: "maxAttempts", Value: 3},
			{Key: "finishedAt", Value: time.Now()}, {Key: "args", Value: bson.D{}}}
	}
	_, err := store.Of(b.q).Collection().InsertMany(b.ctx, docs)
	require.NoError(t, err)
	all, more, err := b.q.List(b.ctx, queue.JobFilter{}, "", 1000)
	require.NoError(t, err)
	require.False(t, more)
	require.Len(t, all, len(ids))
	out := make([]queue.JobID, len(all))
	for i, j := range all {
		out[i] = j.JobID
	}
	return out
}

// findable reports whether the server finds the job with id by an _id
// equality. MongoDB always does; devdb does not find a string id that is
// not UTF-8 (FerretDB v1 stores its bytes, and reads them back with
// U+FFFD), so the actions on such ids are tested on MongoDB only.
func findable(t *testing.T, b bundle, id queue.JobID) bool {
	t.Helper()
	list, _, err := b.q.List(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{id}}, "", 1)
	require.NoError(t, err)
	if len(list) == 0 {
		s, _ := id.StringID()
		require.Contains(t, s, "\uFFFD", "only a string the server mangled may be missing: %s", id)
		t.Logf("the server cannot look up %q by its _id (FerretDB v1 and a string that is not UTF-8)", s)
		return false
	}
	return true
}

// TestJobIDTokensRoundTrip: every id's token reads back as the same id, of
// its type; docket's own ids are their own tokens; tokens need no quoting
// in a shell word or a URL path segment; malformed tokens are refused.
func TestJobIDTokensRoundTrip(t *testing.T) {
	b := setup(t)
	ids := insertOdd(t, b, oddIDs())
	seen := map[string]bool{}
	for _, id := range ids {
		tok := id.Token()
		require.Regexp(t, `^[A-Za-z0-9_:+,/@.-]+$`, tok, "id %s", id)
		require.NotContains(t, []string{".", ".."}, tok)
		require.False(t, seen[tok], "two ids share token %s", tok)
		seen[tok] = true
		back, err := queue.ParseJobID(tok)
		require.NoError(t, err, tok)
		require.Equal(t, id, back, "token %s", tok)
		// Each reads its own job.
		if !findable(t, b, id) {
			continue
		}
		list, _, err := b.q.List(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{back}}, "", 2)
		require.NoError(t, err)
		require.Len(t, list, 1, "token %s", tok)
		require.Equal(t, id, list[0].JobID)
	}
	require.Equal(t, "01900000-0000-7000-8000-000000000001", queue.StringJobID("01900000-0000-7000-8000-000000000001").Token())
	require.Equal(t, "orders/42", queue.StringJobID("orders/42").Token())
	require.Equal(t, `{"$numberInt":"7"}`, ids[3].String())
	require.Equal(t, "invoice?7", queue.StringJobID("invoice?7").String())
	// A string typed by hand that is not a token is that string.
	id, err := queue.ParseJobID("invoice?7")
	require.NoError(t, err)
	require.Equal(t, queue.StringJobID("invoice?7"), id)

	// A string that is not UTF-8 keeps its bytes (MongoDB stores them as
	// given).
	notUTF8 := queue.StringJobID("bad\xff")
	require.Equal(t, "@", notUTF8.Token()[:1])
	back, err := queue.ParseJobID(notUTF8.Token())
	require.NoError(t, err)
	s, ok := back.StringID()
	require.True(t, ok)
	require.Equal(t, "bad\xff", s)

	for _, bad := range []string{"@", "@!!", "@AQ", "@Ag", "@EAcAAAAA"} {
		_, err := queue.ParseJobID(bad)
		require.ErrorIs(t, err, queue.ErrBadJobID, bad)
	}
}

// TestListPagesAcrossIDTypes: paging lists every job once, in order, with
// ids of every type among docket's (issue 21 item 6: a page that ended at
// _id 7 skipped every string id after it).
func TestListPagesAcrossIDTypes(t *testing.T) {
	b := setup(t)
	ids := insertOdd(t, b, oddIDs())
	for i := range 3 {
		r, err := b.q.Enqueue(b.ctx, "k", bson.M{"i": i}, queue.InsertOpts{})
		require.NoError(t, err)
		ids = append(ids, queue.StringJobID(r.ID))
	}
	all, _, err := b.q.List(b.ctx, queue.JobFilter{}, "", 1000)
	require.NoError(t, err)
	require.Len(t, all, len(ids))
	for _, f := range []queue.JobFilter{{}, {States: []jobs.State{jobs.StateDead}}} {
		want := 0
		for _, j := range all {
			if len(f.States) == 0 || j.State == f.States[0] {
				want++
			}
		}
		for _, limit := range []int{1, 2, 5} {
			var got []queue.JobID
			after := ""
			for pages := 0; ; pages++ {
				require.Less(t, pages, 100, "paging does not end")
				list, more, err := b.q.List(b.ctx, f, after, limit)
				require.NoError(t, err)
				for _, j := range list {
					got = append(got, j.JobID)
				}
				if !more {
					break
				}
				after = list[len(list)-1].JobID.Token()
			}
			require.Len(t, got, want, "filter %+v, %d a page: %v", f, limit, got)
			for i, id := range got {
				if len(f.States) == 0 {
					require.Equal(t, all[i].JobID, id, "filter %+v, %d a page, job %d", f, limit, i)
				}
			}
		}
	}
	// The page after each id starts at the next one.
	for i := range len(all) - 1 {
		list, _, err := b.q.List(b.ctx, queue.JobFilter{}, all[i].JobID.Token(), 1)
		require.NoError(t, err)
		require.Len(t, list, 1, "after %s", all[i].ID)
		require.Equal(t, all[i+1].JobID, list[0].JobID, "after %s", all[i].ID)
	}
	_, _, err = b.q.List(b.ctx, queue.JobFilter{}, "@zz", 1)
	require.ErrorIs(t, err, queue.ErrBadJobID)
}

// TestActionsOnIDsOfAnyType: retry, cancel and delete reach a job whatever
// its id's type, and only that job.
func TestActionsOnIDsOfAnyType(t *testing.T) {
	b := setup(t)
	ids := insertOdd(t, b, []any{int32(7), bson.ObjectID{1}, "7", "bad\xff", 2.5})
	seven := ids[1] // after 2.5
	require.Equal(t, `{"$numberInt":"7"}`, seven.String())
	state := func(id queue.JobID) string {
		list, _, err := b.q.List(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{id}}, "", 1)
		require.NoError(t, err)
		if len(list) == 0 {
			return "gone"
		}
		return string(list[0].State)
	}
	for _, id := range ids {
		if !findable(t, b, id) {
			continue
		}
		res, err := b.q.Retry(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{id}})
		require.NoError(t, err)
		require.Len(t, res, 1)
		require.NoError(t, res[0].Err, id.String())
		require.True(t, id.Equal(res[0].JobID))
		require.Equal(t, "available", state(id), id.String())
		out, err := b.q.CancelJobID(b.ctx, id)
		require.NoError(t, err, id.String())
		require.Equal(t, queue.Cancelled, out)
		require.Equal(t, "cancelled", state(id), id.String())
		res, err = b.q.Delete(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{id}}, false)
		require.NoError(t, err)
		require.Len(t, res, 1)
		require.NoError(t, res[0].Err, id.String())
		require.Equal(t, "gone", state(id), id.String())
	}
	res, err := b.q.Delete(b.ctx, queue.JobFilter{JobIDs: []queue.JobID{seven}}, false)
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, queue.ErrNotFound)
	_, err = b.q.CancelJobID(b.ctx, seven)
	require.ErrorIs(t, err, queue.ErrNotFound)
	require.Contains(t, err.Error(), `{"$numberInt":"7"}`)
	_, err = b.q.Cancel(b.ctx, "no-such-job")
	require.ErrorContains(t, err, "cancel job no-such-job: ")
}

// ExampleJobID: a job's id names it on a command line and in a URL, of
// whatever type it is.
func ExampleJobID() {
	for _, id := range []queue.JobID{queue.StringJobID("01900000-0000-7000-8000-000000000001"), queue.StringJobID("orders?42")} {
		back, _ := queue.ParseJobID(id.Token())
		fmt.Println(id.Token(), back.String())
	}
	// Output:
	// 01900000-0000-7000-8000-000000000001 01900000-0000-7000-8000-000000000001
	// @AgoAAABvcmRlcnM_NDIA orders?42
}
