package queue

import (
	"context"
	"testing"

	"github.com/docketq/docket/internal/store"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// TestCollectionsBesideJobs: the collections beside the jobs collection
// take their default names beside the default one, and C_name beside
// another jobs collection C.
func TestCollectionsBesideJobs(t *testing.T) {
	t.Parallel()
	c, err := mongo.Connect() // never reached: names only
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	for coll, prefix := range map[string]string{"": "", DefaultCollection: "", "c": "c_"} {
		q, err := New(c.Database("unused"), Config{Collection: coll})
		require.NoError(t, err)
		st := store.Of(q)
		for want, got := range map[string]*mongo.Collection{
			DefaultQueuesCollection:          st.QueuesColl(),
			store.DefaultWorkersCollection:   st.WorkersColl(),
			store.DefaultLimitsCollection:    st.BesideJobs(store.DefaultLimitsCollection),
			store.DefaultRatePartsCollection: st.BesideJobs(store.DefaultRatePartsCollection),
			DefaultStatsCollection:           q.statsColl(),
		} {
			require.Equal(t, prefix+want, got.Name(), "beside jobs collection %q", coll)
		}
	}
}
