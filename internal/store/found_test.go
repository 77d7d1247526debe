package store_test

import (
	"testing"

	"github.com/docketq/docket/internal/store"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestUpdateFoundRechecksItsFilter: a repair reads the ids of the jobs its
// filter matches (FoundIDs), then writes by those ids with the filter
// repeated (UpdateIDs).
// A job changed while it stalled in between so that it no longer matches
// is left alone (only an _id condition would have overwritten it); the
// others are changed.
func TestUpdateFoundRechecksItsFilter(t *testing.T) {
	b := setup(t)
	ids := enqueueN(t, b, 3)
	jobsColl := b.db.Collection("jobs")
	for _, id := range ids {
		_, err := jobsColl.UpdateOne(b.ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "note", Value: nil}}}})
		require.NoError(t, err)
	}
	s := store.WithFindUpdateHook(store.Of(b.q), func() {
		_, err := jobsColl.UpdateOne(b.ctx, bson.D{{Key: "_id", Value: ids[0]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "note", Value: "kept"}}}})
		require.NoError(t, err)
	})
	n, err := updateFound(b, s)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	key := func(id string) bson.RawValue {
		raw, err := jobsColl.FindOne(b.ctx, bson.D{{Key: "_id", Value: id}}).Raw()
		require.NoError(t, err)
		return raw.Lookup("note")
	}
	require.Equal(t, "kept", key(ids[0]).StringValue(), "the value written meanwhile is kept")
	require.Zero(t, key(ids[1]).Type)
	require.Zero(t, key(ids[2]).Type)

	n, err = updateFound(b, store.Of(b.q))
	require.NoError(t, err)
	require.Zero(t, n, "nothing found, nothing written")
}

// updateFound unsets the null notes of the jobs as a repair does.
func updateFound(b bundle, s *store.Store) (int, error) {
	nullNote := bson.D{{Key: "note", Value: bson.D{{Key: "$type", Value: "null"}}}}
	ids, err := s.FoundIDs(b.ctx, nullNote)
	if err != nil {
		return 0, err
	}
	return s.UpdateIDs(b.ctx, ids, nullNote, bson.D{{Key: "$unset", Value: bson.D{{Key: "note", Value: ""}}}})
}
