package devdb

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// BenchmarkUpdateMany times an updateMany that modifies n of the 5,000
// documents of a collection (selected by _id, as a claim of a batch stamps
// its jobs): the cost of a multi-document write on devdb.
func BenchmarkUpdateMany(b *testing.B) {
	ctx := context.Background()
	s, err := Start(ctx, Config{Addr: "127.0.0.1:0", Dir: b.TempDir(), Logger: zap.NewNop()})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, s.Close()) })
	c, err := mongo.Connect(options.Client().ApplyURI(s.URI()))
	require.NoError(b, err)
	b.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	coll := c.Database("bench").Collection("docs")
	docs := make([]any, 5000)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("d%05d", i)}, {Key: "state", Value: "available"}, {Key: "n", Value: 0}}
	}
	_, err = coll.InsertMany(ctx, docs)
	require.NoError(b, err)
	time.Sleep(2 * indexEvery) // the _id lookup index, as a collection in use has it
	for _, n := range []int{1, 100, 1000} {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("d%05d", i*(5000/n))
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			start := time.Now()
			for i := 0; b.Loop(); i++ {
				res, err := coll.UpdateMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: i + 1}}}})
				require.NoError(b, err)
				require.EqualValues(b, n, res.ModifiedCount)
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N*n), "µs/doc")
		})
	}
}

// TestUpdateManyKeepsWritesBeforeAnError: as on MongoDB, an updateMany that
// fails at one document keeps the documents it modified before it (devdb
// writes a statement's documents together, and must write those too).
func TestUpdateManyKeepsWritesBeforeAnError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	coll := connect(t, startServer(t).URI()).Database("db").Collection("docs")
	for i := range 10 {
		var n any = 0
		if i == 5 {
			n = "not a number"
		}
		_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: i}, {Key: "n", Value: n}})
		require.NoError(t, err)
	}
	_, err := coll.UpdateMany(ctx, bson.D{}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})
	require.Error(t, err)
	for i := range 10 {
		var doc struct{ N any }
		require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: i}}).Decode(&doc))
		switch {
		case i < 5:
			require.EqualValues(t, 1, doc.N, "document %d, written before the failing one", i)
		case i == 5:
			require.Equal(t, "not a number", doc.N)
		default:
			require.EqualValues(t, 0, doc.N, "document %d, after the failing one", i)
		}
	}
}

// TestUpdateManyKeepsWritesBeforeADuplicateKey: as on MongoDB, an
// updateMany that meets a unique index's duplicate at one document keeps
// the documents it modified before it.
func TestUpdateManyKeepsWritesBeforeADuplicateKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	coll := connect(t, startServer(t).URI()).Database("db").Collection("docs")
	_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "u", Value: 1}}, Options: options.Index().SetUnique(true)})
	require.NoError(t, err)
	for i := range 10 {
		u := i * 10
		switch i {
		case 5:
			u = 99 // $inc makes it 100, document 9's
		case 9:
			u = 100
		}
		_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: i}, {Key: "u", Value: u}})
		require.NoError(t, err)
	}
	_, err = coll.UpdateMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$lt", Value: 9}}}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "u", Value: 1}}}})
	require.Error(t, err)
	for i := range 5 {
		var doc struct{ U int }
		require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: i}}).Decode(&doc))
		require.Equal(t, i*10+1, doc.U, "document %d, written before the failing one", i)
	}
}

// An update's statement is kept prepared over commands (fsql's
// PreparedIn): a collection dropped and made again with the same name,
// and given a new index meanwhile, is written as it is now, and updates
// running at once, more than the cache has ever held, all apply.
func TestKeptUpdateStatementsFollowTheirTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := connect(t, startServer(t).URI()).Database("db")
	for round := range 3 {
		coll := db.Collection("docs")
		for i := range 5 {
			_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: i}, {Key: "n", Value: 0}})
			require.NoError(t, err)
		}
		if round == 1 {
			_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "n", Value: 1}, {Key: "m", Value: 1}}})
			require.NoError(t, err)
		}
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Go(func() {
				for range 20 {
					_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: i}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})
					assert.NoError(t, err)
				}
			})
		}
		wg.Wait()
		for i := range 5 {
			var doc struct{ N int }
			require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: i}}).Decode(&doc))
			require.Equal(t, 20, doc.N, "round %d, document %d", round, i)
		}
		require.NoError(t, coll.Drop(ctx))
	}
}
