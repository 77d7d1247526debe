package devdb

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TestReadsSkipTheLock: while a command holds the lock (here the test), the
// commands that only read are answered, and the writes wait: a findAndModify,
// an update, and an aggregate that ends in $out or $merge. The waiting ones
// run once the lock is free.
func TestReadsSkipTheLock(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	mc := connect(t, s.URI())
	coll := mc.Database("rd").Collection("c")
	_, err := coll.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: 1}, {Key: "k", Value: "a"}},
		bson.D{{Key: "_id", Value: 2}, {Key: "k", Value: "b"}},
	})
	require.NoError(t, err)

	release := holdLock(t, s)

	quick := func(what string, f func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, f(ctx), "%s while the lock is held", what)
	}
	quick("find", func(ctx context.Context) error {
		var got []bson.M
		cur, err := coll.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "k", Value: -1}}))
		if err == nil {
			err = cur.All(ctx, &got)
		}
		if err == nil && len(got) != 2 {
			t.Errorf("find: %d documents, want 2", len(got))
		}
		return err
	})
	quick("count", func(ctx context.Context) error {
		n, err := coll.CountDocuments(ctx, bson.D{{Key: "k", Value: "a"}})
		if err == nil && n != 1 {
			t.Errorf("count: %d, want 1", n)
		}
		return err
	})
	// FerretDB v1's distinct refuses the maxTimeMS a deadline sends.
	require.NoError(t, coll.Distinct(context.Background(), "k", bson.D{}).Err(), "distinct while the lock is held")
	quick("aggregate", func(ctx context.Context) error {
		cur, err := coll.Aggregate(ctx, mongo.Pipeline{{{Key: "$match", Value: bson.D{}}}, {{Key: "$count", Value: "n"}}})
		if err == nil {
			err = cur.Close(ctx)
		}
		return err
	})
	quick("listIndexes", func(ctx context.Context) error {
		_, err := coll.Indexes().ListSpecifications(ctx)
		return err
	})
	quick("listCollections", func(ctx context.Context) error {
		_, err := mc.Database("rd").ListCollectionNames(ctx, bson.D{})
		return err
	})

	// The writes wait for the lock. Each is sent on a connection of its
	// own and its reply awaited after the lock is released.
	type result struct {
		what string
		err  error
	}
	results := make(chan result, 4)
	write := func(what string, f func(ctx context.Context, c *mongo.Collection) error) {
		c := connect(t, s.URI()).Database("rd").Collection("c")
		go func() { results <- result{what, f(ctx, c)} }()
	}
	write("findAndModify", func(ctx context.Context, c *mongo.Collection) error {
		return c.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "k", Value: "x"}}}}).Err()
	})
	write("update", func(ctx context.Context, c *mongo.Collection) error {
		_, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: 2}}, bson.D{{Key: "$set", Value: bson.D{{Key: "k", Value: "y"}}}})
		return err
	})
	write("aggregate $out", func(ctx context.Context, c *mongo.Collection) error {
		cur, err := c.Aggregate(ctx, mongo.Pipeline{{{Key: "$match", Value: bson.D{}}}, {{Key: "$out", Value: "copy"}}})
		if err == nil {
			err = cur.Close(ctx)
		}
		return err
	})
	select {
	case r := <-results:
		t.Fatalf("%s was answered (err %v) while the lock was held", r.what, r.err)
	case <-time.After(500 * time.Millisecond):
	}

	release()
	for range 3 {
		select {
		case r := <-results:
			// FerretDB v1 may refuse $out; it must only not have run early.
			if r.what != "aggregate $out" {
				require.NoError(t, r.err, r.what)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a write was not answered after the lock was released")
		}
	}
	var doc struct{ K string }
	require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: 1}}).Decode(&doc))
	require.Equal(t, "x", doc.K)
}

// TestReadersAreBounded: at most maxReaders read-only commands run at once;
// one more waits for a place, and is answered when one is free.
func TestReadersAreBounded(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	coll := connect(t, s.URI()).Database("rd").Collection("c")
	_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
	require.NoError(t, err)

	for range maxReaders {
		s.front.readCh <- struct{}{}
	}
	freed := false
	t.Cleanup(func() {
		if !freed {
			for range maxReaders {
				<-s.front.readCh
			}
		}
	})

	done := make(chan error, 1)
	go func() { done <- coll.FindOne(ctx, bson.D{{Key: "n", Value: 1}}).Err() }()
	select {
	case err := <-done:
		t.Fatalf("a find was answered (err %v) while every reader's place was taken", err)
	case <-time.After(500 * time.Millisecond):
	}

	// A write does not wait for readers, nor does a find by _id.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	other := connect(t, s.URI()).Database("rd").Collection("c")
	_, err = other.InsertOne(wctx, bson.D{{Key: "_id", Value: 2}, {Key: "n", Value: 1}})
	require.NoError(t, err)
	require.NoError(t, other.FindOne(wctx, bson.D{{Key: "_id", Value: 2}}).Err())
	require.NoError(t, other.FindOne(wctx, bson.D{{Key: "n", Value: 1}, {Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{2}}}}}).Err())

	<-s.front.readCh
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the find was not answered once a place was free")
	}
	for range maxReaders - 1 {
		<-s.front.readCh
	}
	freed = true
}

func TestReadOnly(t *testing.T) {
	doc := func(d bson.D) []byte {
		b, err := bson.Marshal(d)
		require.NoError(t, err)
		return b
	}
	agg := func(stages ...bson.D) []byte {
		p := bson.A{}
		for _, s := range stages {
			p = append(p, s)
		}
		return doc(bson.D{{Key: "aggregate", Value: "c"}, {Key: "pipeline", Value: p}})
	}
	match := bson.D{{Key: "$match", Value: bson.D{}}}
	for _, c := range []struct {
		name string
		cmd  string
		doc  []byte
		want bool
	}{
		{"find", "find", doc(bson.D{{Key: "find", Value: "c"}}), true},
		{"count", "count", doc(bson.D{{Key: "count", Value: "c"}}), true},
		{"findAndModify", "findAndModify", doc(bson.D{{Key: "findAndModify", Value: "c"}}), false},
		{"update", "update", doc(bson.D{{Key: "update", Value: "c"}}), false},
		{"aggregate reading", "aggregate", agg(match, bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: nil}}}}), true},
		{"aggregate, empty pipeline", "aggregate", agg(), true},
		{"aggregate $out", "aggregate", agg(match, bson.D{{Key: "$out", Value: "x"}}), false},
		{"aggregate $merge", "aggregate", agg(bson.D{{Key: "$merge", Value: bson.D{{Key: "into", Value: "x"}}}}), false},
		{"aggregate, pipeline not an array", "aggregate", doc(bson.D{{Key: "aggregate", Value: "c"}, {Key: "pipeline", Value: "x"}}), false},
		{"aggregate, stage not a document", "aggregate", doc(bson.D{{Key: "aggregate", Value: "c"}, {Key: "pipeline", Value: bson.A{1}}}), false},
		{"aggregate, no pipeline", "aggregate", doc(bson.D{{Key: "aggregate", Value: "c"}}), false},
		{"aggregate, malformed", "aggregate", []byte{1, 2, 3}, false},
	} {
		require.Equal(t, c.want, readOnly(c.cmd, c.doc), c.name)
	}
}

func TestByID(t *testing.T) {
	find := func(filter any) []byte {
		d := bson.D{{Key: "find", Value: "c"}}
		if filter != nil {
			d = append(d, bson.E{Key: "filter", Value: filter})
		}
		b, err := bson.Marshal(d)
		require.NoError(t, err)
		return b
	}
	for _, c := range []struct {
		name string
		cmd  string
		doc  []byte
		want bool
	}{
		{"equality", "find", find(bson.D{{Key: "_id", Value: "a"}}), true},
		{"equality beside others", "find", find(bson.D{{Key: "state", Value: "x"}, {Key: "_id", Value: 7}}), true},
		{"$in", "find", find(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{1, 2}}}}}), true},
		{"$eq", "find", find(bson.D{{Key: "_id", Value: bson.D{{Key: "$eq", Value: 1}}}}), true},
		{"$gt", "find", find(bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: 1}}}}), false},
		{"a document id", "find", find(bson.D{{Key: "_id", Value: bson.D{{Key: "a", Value: 1}}}}), false},
		{"a regex", "find", find(bson.D{{Key: "_id", Value: bson.Regex{Pattern: "a"}}}), false},
		{"no _id", "find", find(bson.D{{Key: "state", Value: "x"}}), false},
		{"no filter", "find", find(nil), false},
		{"inside $or", "find", find(bson.D{{Key: "$or", Value: bson.A{bson.D{{Key: "_id", Value: 1}}}}}), false},
		{"count", "count", find(bson.D{{Key: "_id", Value: 1}}), false},
		{"malformed", "find", []byte{1, 2, 3}, false},
	} {
		require.Equal(t, c.want, byID(c.cmd, c.doc), c.name)
	}
}
