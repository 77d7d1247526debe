package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// jobIDOf is the JobID of the _id value v.
func jobIDOf(t *testing.T, v any) queue.JobID {
	t.Helper()
	doc, err := bson.Marshal(bson.D{{Key: "_id", Value: v}})
	require.NoError(t, err)
	return queue.JobIDOf(doc)
}

// stateOf is the state of the job whose _id is v, "gone" when there is
// none.
func stateOf(t *testing.T, db *mongo.Database, v any) string {
	t.Helper()
	raw, err := db.Collection(queue.DefaultCollection).FindOne(context.Background(), bson.D{{Key: "_id", Value: v}}).Raw()
	if err == mongo.ErrNoDocuments {
		return "gone"
	}
	require.NoError(t, err)
	s, _ := raw.Lookup("state").StringValueOK()
	return s
}

// TestCtlActsOnJobsOfAnyID: issue 21 item 5, for docketctl. A job another
// application wrote with an _id that is not a string (a number, an
// ObjectId), or a string no shell word or URL holds as it is ("/", "?",
// "#" and a control character), is listed with the token every command
// takes back (the id's own string for a plain one, "@…" otherwise), beside
// its id escaped; show, retry, cancel and delete act on it by that token.
func TestCtlActsOnJobsOfAnyID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	now := time.Now().UTC()
	for _, tc := range []struct {
		name  string
		id    any
		shown string // the id as list prints it beside its token
	}{
		{"number", int32(7), `{"$numberInt":"7"}`},
		{"ObjectId", bson.ObjectID{1, 2, 3}, `{"$oid":"010203000000000000000000"}`},
		{"odd string", "orders/4?2#x\x1b[2K", `"orders/4?2#x\x1b[2K"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := db.Collection(queue.DefaultCollection).DeleteMany(ctx, bson.D{})
			require.NoError(t, err)
			docs := []any{bson.D{{Key: "_id", Value: tc.id}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "q"}, {Key: "state", Value: "dead"},
				{Key: "attempt", Value: 1}, {Key: "maxAttempts", Value: 1}, {Key: "runAt", Value: now}, {Key: "createdAt", Value: now}, {Key: "updatedAt", Value: now}}}
			_, isString := tc.id.(string)
			if !isString {
				// A job whose string id is the foreign id's extended JSON,
				// as list printed it before: the token tells them apart.
				docs = append(docs, bson.D{{Key: "_id", Value: jobIDOf(t, tc.id).String()}, {Key: "kind", Value: "k"}, {Key: "queue", Value: "q"},
					{Key: "state", Value: "dead"}, {Key: "createdAt", Value: now}, {Key: "updatedAt", Value: now}})
			}
			_, err = db.Collection(queue.DefaultCollection).InsertMany(ctx, docs)
			require.NoError(t, err)
			token := jobIDOf(t, tc.id).Token()
			require.True(t, strings.HasPrefix(token, "@"), token)

			out, errs, code := runCtl(t, uri, db, "list")
			require.Zero(t, code, errs)
			requireSafe(t, out, false)
			require.Contains(t, out, "\n"+token+" ("+tc.shown+")  ", "the token first, for copying, then the id escaped: %s", out)

			out, errs, code = runCtl(t, uri, db, "show", token)
			require.Zero(t, code, errs)
			requireSafe(t, out, false)
			require.Contains(t, out, "job "+token+" ("+tc.shown+")\n")
			require.Contains(t, out, "state:             dead")

			out, errs, code = runCtl(t, uri, db, "retry", token)
			require.Zero(t, code, errs)
			requireSafe(t, out, true)
			require.Equal(t, token+" ("+tc.shown+")\tretried (was dead)\n", out)
			require.Equal(t, "available", stateOf(t, db, tc.id))

			out, errs, code = runCtl(t, uri, db, "cancel", token)
			require.Zero(t, code, errs)
			requireSafe(t, out, true)
			require.Equal(t, token+" ("+tc.shown+")\tcancelled\n", out)
			require.Equal(t, "cancelled", stateOf(t, db, tc.id))

			out, errs, code = runCtl(t, uri, db, "delete", token)
			require.Zero(t, code, errs)
			requireSafe(t, out, true)
			require.Equal(t, token+" ("+tc.shown+")\tdeleted (was cancelled)\n", out)
			require.Equal(t, "gone", stateOf(t, db, tc.id))
			if !isString {
				require.Equal(t, "dead", stateOf(t, db, jobIDOf(t, tc.id).String()), "the job whose string id looks like it is untouched")
			}

			_, errs, code = runCtl(t, uri, db, "show", token)
			require.Equal(t, 2, code)
			requireSafe(t, errs, false)
			require.Contains(t, errs, "no job with id "+token+" ("+tc.shown+")")
		})
	}
}

// TestCtlRefusesBadJobTokens: a token that starts with "@" and is not one
// list prints, an empty id, or no id where one is required, is bad input,
// named escaped.
func TestCtlRefusesBadJobTokens(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	for _, verb := range []string{"show", "retry", "cancel", "delete"} {
		_, errs, code := runCtl(t, testdb.URI(), db, verb, "@!\x1b[2K")
		require.Equal(t, 2, code, verb)
		requireSafe(t, errs, false)
		require.Contains(t, errs, "not a job id", verb)
		_, errs, code = runCtl(t, testdb.URI(), db, verb, "")
		require.Equal(t, 2, code, verb)
		require.Contains(t, errs, "empty job id", verb)
	}
	for _, verb := range []string{"show", "cancel", "delete"} {
		_, errs, code := runCtl(t, testdb.URI(), db, verb)
		require.Equal(t, 2, code, verb)
		require.Contains(t, errs, "give the ids of the jobs to "+verb, verb)
	}
}

// TestCtlRefusesToCancelAForeignTransfer: a transfer job whose id is not a
// string was not enqueued by docket, and cancelling only the job would
// leave its transfer to recovery: cancel refuses it, as the dashboard does.
func TestCtlRefusesToCancelAForeignTransfer(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	_, err := db.Collection(queue.DefaultCollection).InsertOne(context.Background(), bson.D{
		{Key: "_id", Value: int32(8)}, {Key: "kind", Value: handlers.TransferKind}, {Key: "queue", Value: "q"}, {Key: "state", Value: "available"},
	})
	require.NoError(t, err)
	out, errs, code := runCtl(t, testdb.URI(), db, "cancel", jobIDOf(t, int32(8)).Token())
	require.Equal(t, 2, code, out)
	require.Contains(t, errs, "transfer cannot be cancelled")
	require.Equal(t, "available", stateOf(t, db, int32(8)))
}
