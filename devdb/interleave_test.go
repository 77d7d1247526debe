package devdb

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// startInterleaved starts a server with Interleave set as asked and the
// given seed, and returns it with the log lines it writes.
func startInterleaved(t *testing.T, interleave bool, seed int64) (*Server, *observer.ObservedLogs) {
	t.Helper()

	b := startFaults(t, "", Config{Interleave: interleave, Seed: seed})
	return b.srv, b.logs
}

// raceDocs is how many documents the racing multi-document writes cover.
const raceDocs = 100

func raceID(i int) string { return fmt.Sprintf("d%03d", i) }

// insertRaceDocs inserts raceDocs documents {_id, i, state: "a"} in _id
// order.
func insertRaceDocs(t *testing.T, coll *mongo.Collection) {
	t.Helper()

	docs := make([]any, raceDocs)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: raceID(i)}, {Key: "i", Value: i}, {Key: "state", Value: "a"}}
	}
	_, err := coll.InsertMany(context.Background(), docs)
	require.NoError(t, err)
}

// flipFromTheTop is the other connection's writer: once started says the
// multi-document write has begun, it takes documents out of its filter
// ({state: "a"} → "x", stamping wat), from the last _id down, one updateOne
// each, until done closes. It returns how many it changed.
func flipFromTheTop(t *testing.T, coll *mongo.Collection, started func() bool, done <-chan struct{}) int {
	t.Helper()
	ctx := context.Background()

	for !started() {
		select {
		case <-done:
			return 0 // it finished before a document could be seen written
		default:
		}
	}

	flipped := 0
	for k := raceDocs - 1; k >= 0; k-- {
		select {
		case <-done:
			return flipped
		default:
		}
		res, err := coll.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: raceID(k)}, {Key: "state", Value: "a"}},
			bson.D{
				{Key: "$set", Value: bson.D{{Key: "state", Value: "x"}}},
				{Key: "$currentDate", Value: bson.D{{Key: "wat", Value: bson.D{{Key: "$type", Value: "timestamp"}}}}},
			})
		require.NoError(t, err)
		flipped += int(res.ModifiedCount)
	}

	return flipped
}

// raceUpdateMany runs updateMany({state: "a"} → "b", stamping at) over
// raceDocs documents while another connection flips documents from the top
// out of its filter, and checks what both report against what the
// collection holds. It returns the updateMany's n, how many the other
// connection flipped, and whether one of its writes is stamped strictly
// between the updateMany's first and last document.
func raceUpdateMany(t *testing.T, interleave bool) (n int64, flipped int, between bool, logs *observer.ObservedLogs) {
	t.Helper()
	ctx := context.Background()

	s, logs := startInterleaved(t, interleave, 1)
	coll := connect(t, s.URI()).Database("race").Collection("docs")
	other := connect(t, s.URI()).Database("race").Collection("docs")
	insertRaceDocs(t, coll)

	done := make(chan struct{})
	var res *mongo.UpdateResult
	var err error
	go func() {
		defer close(done)
		res, err = coll.UpdateMany(ctx, bson.D{{Key: "state", Value: "a"}}, bson.D{
			{Key: "$set", Value: bson.D{{Key: "state", Value: "b"}}},
			{Key: "$currentDate", Value: bson.D{{Key: "at", Value: bson.D{{Key: "$type", Value: "timestamp"}}}}},
		})
	}()
	started := func() bool {
		return other.FindOne(ctx, bson.D{{Key: "state", Value: "b"}}).Err() == nil
	}
	flipped = flipFromTheTop(t, other, started, done)
	<-done
	require.NoError(t, err)

	var docs []struct {
		State string         `bson:"state"`
		At    bson.Timestamp `bson:"at"`
		Wat   bson.Timestamp `bson:"wat"`
	}
	cur, err := coll.Find(ctx, bson.D{})
	require.NoError(t, err)
	require.NoError(t, cur.All(ctx, &docs))
	require.Len(t, docs, raceDocs)

	var b, x int
	var first, last uint32 = ^uint32(0), 0
	for _, d := range docs {
		switch d.State {
		case "b":
			b++
			first, last = min(first, d.At.I), max(last, d.At.I)
		case "x":
			x++
		default:
			t.Fatalf("document left in state %q", d.State)
		}
	}
	for _, d := range docs {
		if d.State == "x" && d.Wat.I > first && d.Wat.I < last {
			between = true
		}
	}

	// Each document written by exactly one of the two; the updateMany
	// reports the documents it wrote.
	require.Equal(t, raceDocs, b+x)
	require.Equal(t, flipped, x)
	require.EqualValues(t, b, res.MatchedCount)
	require.EqualValues(t, b, res.ModifiedCount)

	return res.MatchedCount, flipped, between, logs
}

// TestInterleaveUpdateMany: with Interleave, another connection's updates
// run between the documents of an updateMany (stamped between its first
// and last), and the documents they took out of its filter after it read
// the matching _ids are skipped, not counted.
func TestInterleaveUpdateMany(t *testing.T) {
	t.Parallel()

	n, flipped, between, logs := raceUpdateMany(t, true)
	require.Positive(t, flipped, "no write of the other connection ran between the updateMany's documents")
	require.True(t, between, "no write of the other connection is stamped between the updateMany's first and last document")
	require.EqualValues(t, raceDocs-flipped, n)

	// It had read all raceDocs _ids as matching: the flipped ones were
	// re-checked at their write and skipped.
	stmts := logs.FilterMessage("interleave: statement applied one document at a time").AllUntimed()
	require.Len(t, stmts, 1)
	require.EqualValues(t, raceDocs, stmts[0].ContextMap()["ids"])
	require.EqualValues(t, n, stmts[0].ContextMap()["n"])
}

// TestInterleaveOffUpdateManyIsAtomic: without Interleave the same race
// shows devdb's atomic updateMany: once one document is seen written, all
// are, and no other write lands in between.
func TestInterleaveOffUpdateManyIsAtomic(t *testing.T) {
	t.Parallel()

	n, flipped, between, logs := raceUpdateMany(t, false)
	require.Zero(t, flipped)
	require.False(t, between)
	require.EqualValues(t, raceDocs, n)
	require.Zero(t, logs.FilterMessage("interleave: statement applied one document at a time").Len())
}

// raceDeleteMany runs deleteMany({state: "a"}) over raceDocs documents
// while another connection flips documents from the top out of its filter.
// It returns the deleteMany's n and how many the other connection flipped.
func raceDeleteMany(t *testing.T, interleave bool) (n int64, flipped int) {
	t.Helper()
	ctx := context.Background()

	s, _ := startInterleaved(t, interleave, 1)
	coll := connect(t, s.URI()).Database("race").Collection("docs")
	other := connect(t, s.URI()).Database("race").Collection("docs")
	insertRaceDocs(t, coll)

	done := make(chan struct{})
	var res *mongo.DeleteResult
	var err error
	go func() {
		defer close(done)
		res, err = coll.DeleteMany(ctx, bson.D{{Key: "state", Value: "a"}})
	}()
	started := func() bool {
		// The first document in natural order is the first deleted.
		return errors0(other.FindOne(ctx, bson.D{{Key: "_id", Value: raceID(0)}}).Err())
	}
	flipped = flipFromTheTop(t, other, started, done)
	<-done
	require.NoError(t, err)

	left, err := coll.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	xs, err := coll.CountDocuments(ctx, bson.D{{Key: "state", Value: "x"}})
	require.NoError(t, err)
	require.EqualValues(t, flipped, left)
	require.Equal(t, left, xs)
	require.EqualValues(t, raceDocs-left, res.DeletedCount)

	return res.DeletedCount, flipped
}

// errors0 reports whether err says no document was found.
func errors0(err error) bool { return err == mongo.ErrNoDocuments }

// TestInterleaveDeleteMany: with Interleave, another connection's updates
// run between the documents of a deleteMany (after its first document was
// deleted, a document it had read as matching was still there to update),
// and the documents they took out of its filter are not deleted nor
// counted.
func TestInterleaveDeleteMany(t *testing.T) {
	t.Parallel()

	n, flipped := raceDeleteMany(t, true)
	require.Positive(t, flipped, "no write of the other connection ran between the deleteMany's documents")
	require.EqualValues(t, raceDocs-flipped, n)
}

// TestInterleaveOffDeleteManyIsAtomic: without Interleave, once the first
// document is gone, all are.
func TestInterleaveOffDeleteManyIsAtomic(t *testing.T) {
	t.Parallel()

	n, flipped := raceDeleteMany(t, false)
	require.Zero(t, flipped)
	require.EqualValues(t, raceDocs, n)
}

// countsResult is what the plain cases of TestInterleaveCounts report.
type countsResult struct {
	All, None, Same, Upsert *mongo.UpdateResult
	Bulk                    *mongo.BulkWriteResult
	DelNone, DelSome        int64
	ErrIndex, ErrCode       int
	ErrMatched              int64
	UnorderedIndex          int
	UnorderedMatched        int64
}

// plainCases runs multi-document writes whose results MongoDB fixes, on a
// collection of five documents {_id, v: 1, k}.
func plainCases(t *testing.T, coll *mongo.Collection) countsResult {
	t.Helper()
	ctx := context.Background()

	docs := make([]any, 5)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: raceID(i)}, {Key: "v", Value: 1}, {Key: "k", Value: i % 2}}
	}
	_, err := coll.InsertMany(ctx, docs)
	require.NoError(t, err)

	set := func(v any) bson.D { return bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: v}}}} }
	var r countsResult
	r.All, err = coll.UpdateMany(ctx, bson.D{}, set(2))
	require.NoError(t, err)
	r.None, err = coll.UpdateMany(ctx, bson.D{{Key: "v", Value: 99}}, set(3))
	require.NoError(t, err)
	r.Same, err = coll.UpdateMany(ctx, bson.D{}, set(2))
	require.NoError(t, err)
	r.Upsert, err = coll.UpdateMany(ctx, bson.D{{Key: "_id", Value: "up"}, {Key: "v", Value: 7}}, set(7), options.UpdateMany().SetUpsert(true))
	require.NoError(t, err)

	// One update command of three statements, sent as an OP_MSG document
	// sequence: match two (k: 1), match one, upsert.
	r.Bulk, err = coll.BulkWrite(ctx, []mongo.WriteModel{
		mongo.NewUpdateManyModel().SetFilter(bson.D{{Key: "k", Value: 1}}).SetUpdate(set(4)),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: raceID(0)}}).SetUpdate(set(4)),
		mongo.NewUpdateManyModel().SetFilter(bson.D{{Key: "_id", Value: "up2"}}).SetUpdate(set(5)).SetUpsert(true),
	})
	require.NoError(t, err)

	del, err := coll.DeleteMany(ctx, bson.D{{Key: "v", Value: 99}})
	require.NoError(t, err)
	r.DelNone = del.DeletedCount
	del, err = coll.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"up", "up2"}}}}})
	require.NoError(t, err)
	r.DelSome = del.DeletedCount

	// An ordered bulk whose second statement fails on its third document
	// ($inc of a string): the error has the statement's index, and the
	// failed statement counts nothing.
	_, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: raceID(2)}}, set("text"))
	require.NoError(t, err)
	bulk, err := coll.BulkWrite(ctx, []mongo.WriteModel{
		mongo.NewUpdateManyModel().SetFilter(bson.D{{Key: "k", Value: 1}}).SetUpdate(set(6)),
		mongo.NewUpdateManyModel().SetFilter(bson.D{}).SetUpdate(bson.D{{Key: "$inc", Value: bson.D{{Key: "v", Value: 1}}}}),
	})
	var bwe mongo.BulkWriteException
	require.ErrorAs(t, err, &bwe)
	require.Len(t, bwe.WriteErrors, 1)
	r.ErrIndex, r.ErrCode = bwe.WriteErrors[0].Index, bwe.WriteErrors[0].Code
	r.ErrMatched = bulk.MatchedCount

	// Unordered: the failing statement counts nothing, the next one runs.
	bulk, err = coll.BulkWrite(ctx, []mongo.WriteModel{
		mongo.NewUpdateManyModel().SetFilter(bson.D{}).SetUpdate(bson.D{{Key: "$inc", Value: bson.D{{Key: "v", Value: 1}}}}),
		mongo.NewUpdateManyModel().SetFilter(bson.D{{Key: "k", Value: 1}}).SetUpdate(set(8)),
	}, options.BulkWrite().SetOrdered(false))
	require.ErrorAs(t, err, &bwe)
	require.Len(t, bwe.WriteErrors, 1)
	r.UnorderedIndex, r.UnorderedMatched = bwe.WriteErrors[0].Index, bulk.MatchedCount

	return r
}

// TestInterleaveCounts: with Interleave, multi-document writes report n,
// nModified, upserted and writeErrors as MongoDB does, and as devdb does
// without it.
func TestInterleaveCounts(t *testing.T) {
	t.Parallel()

	on, logs := startInterleaved(t, true, 3)
	off, _ := startInterleaved(t, false, 0)
	got := plainCases(t, connect(t, on.URI()).Database("counts").Collection("c"))
	want := plainCases(t, connect(t, off.URI()).Database("counts").Collection("c"))

	require.EqualValues(t, [2]int64{5, 5}, [2]int64{got.All.MatchedCount, got.All.ModifiedCount})
	require.EqualValues(t, [2]int64{0, 0}, [2]int64{got.None.MatchedCount, got.None.ModifiedCount})
	require.EqualValues(t, [2]int64{5, 0}, [2]int64{got.Same.MatchedCount, got.Same.ModifiedCount})
	require.EqualValues(t, [3]int64{0, 0, 1}, [3]int64{got.Upsert.MatchedCount, got.Upsert.ModifiedCount, got.Upsert.UpsertedCount})
	require.Equal(t, "up", got.Upsert.UpsertedID)
	require.EqualValues(t, [3]int64{3, 3, 1}, [3]int64{got.Bulk.MatchedCount, got.Bulk.ModifiedCount, got.Bulk.UpsertedCount})
	require.Equal(t, map[int64]any{2: "up2"}, got.Bulk.UpsertedIDs)
	require.EqualValues(t, [2]int64{0, 2}, [2]int64{got.DelNone, got.DelSome})
	require.Equal(t, 1, got.ErrIndex)
	require.EqualValues(t, 2, got.ErrMatched) // the first statement's two documents only
	require.Equal(t, 0, got.UnorderedIndex)
	require.EqualValues(t, 2, got.UnorderedMatched) // the second statement's

	// Without Interleave FerretDB reports a write error at index 0 with n 0,
	// not MongoDB's index 1 with the first statement's n (2), and ignores
	// ordered: false (it stops at the error, n 0, where MongoDB runs the
	// next statement, n 2): devdb's own answer differs there, not the
	// interleaved one.
	require.Equal(t, [3]any{0, int64(0), int64(0)}, [3]any{want.ErrIndex, want.ErrMatched, want.UnorderedMatched})
	want.ErrIndex, want.ErrMatched, want.UnorderedMatched = got.ErrIndex, got.ErrMatched, got.UnorderedMatched
	require.Equal(t, want, got)

	// The multi-document statements took the interleaved path.
	require.GreaterOrEqual(t, logs.FilterMessage("interleave: statement applied one document at a time").Len(), 8)
}

// TestInterleaveGetMoreBetweenBatches: writes of another connection land
// between a find's first batch and its getMore (getMore runs outside the
// lock, and with Interleave is now and then held back), and FerretDB's
// cursor then returns the collection as it was when the find began: an
// update made after the first batch is not seen, a document deleted after
// it is still returned, one inserted after it is not; nothing is missed
// nor returned twice (MongoDB's cursors may do all of these: devdb does not
// model it).
func TestInterleaveGetMoreBetweenBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	s, logs := startInterleaved(t, true, 5)
	coll := connect(t, s.URI()).Database("cursor").Collection("c")
	other := connect(t, s.URI()).Database("cursor").Collection("c")
	const docs = 40
	for i := range docs {
		_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: raceID(i)}, {Key: "v", Value: 0}})
		require.NoError(t, err)
	}

	for _, sorted := range []bool{false, true} {
		opts := options.Find().SetBatchSize(2)
		if sorted {
			opts.SetSort(bson.D{{Key: "_id", Value: 1}})
		}
		cur, err := coll.Find(ctx, bson.D{{Key: "v", Value: bson.D{{Key: "$gte", Value: 0}}}}, opts)
		require.NoError(t, err)
		var seen []string
		for len(seen) < 2 && cur.Next(ctx) {
			seen = append(seen, cur.Current.Lookup("_id").StringValue())
		}

		// Between the first batch and the first getMore.
		set := bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: -1}}}}
		_, err = other.UpdateMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{raceID(0), raceID(5)}}}}}, set)
		require.NoError(t, err)
		_, err = other.DeleteOne(ctx, bson.D{{Key: "_id", Value: raceID(6)}})
		require.NoError(t, err)
		_, err = other.InsertOne(ctx, bson.D{{Key: "_id", Value: raceID(docs + 1)}, {Key: "v", Value: 0}})
		require.NoError(t, err)
		require.ErrorIs(t, other.FindOne(ctx, bson.D{{Key: "_id", Value: raceID(6)}}).Err(), mongo.ErrNoDocuments)

		for cur.Next(ctx) {
			require.EqualValues(t, 0, cur.Current.Lookup("v").Int32(), "an update made after the first batch is seen")
			seen = append(seen, cur.Current.Lookup("_id").StringValue())
		}
		require.NoError(t, cur.Err())
		want := make([]string, docs)
		for i := range want {
			want[i] = raceID(i)
		}
		require.Equal(t, want, seen, "sorted: %v", sorted)

		// Put the collection back for the next round.
		_, err = other.DeleteOne(ctx, bson.D{{Key: "_id", Value: raceID(docs + 1)}})
		require.NoError(t, err)
		_, err = other.InsertOne(ctx, bson.D{{Key: "_id", Value: raceID(6)}, {Key: "v", Value: 0}})
		require.NoError(t, err)
		_, err = other.UpdateMany(ctx, bson.D{}, bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: 0}}}})
		require.NoError(t, err)
	}

	// Of some 40 getMores, some were held back, each logged.
	held := logs.FilterMessage("interleave: getMore held back").AllUntimed()
	require.NotEmpty(t, held)
	require.Equal(t, "getMore", held[0].ContextMap()["command"])
}

// interleavePoints runs a single-connection workload on a fresh server with
// Interleave and the given seed and returns its logged interleaving points.
func interleavePoints(t *testing.T, seed int64) []string {
	t.Helper()
	ctx := context.Background()

	s, logs := startInterleaved(t, true, seed)
	coll := connect(t, s.URI()).Database("seed").Collection("c")
	insertRaceDocs(t, coll)
	_, err := coll.UpdateMany(ctx, bson.D{}, bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "b"}}}})
	require.NoError(t, err)
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetBatchSize(10))
	require.NoError(t, err)
	require.NoError(t, cur.All(ctx, new([]bson.Raw)))
	_, err = coll.DeleteMany(ctx, bson.D{{Key: "i", Value: bson.D{{Key: "$lt", Value: 50}}}})
	require.NoError(t, err)

	var points []string
	for _, e := range logs.AllUntimed() {
		switch e.Message {
		case "interleave: pause between documents", "interleave: getMore held back":
			m := e.ContextMap()
			points = append(points, fmt.Sprint(m["command"], " stmt ", m["stmt"], " doc ", m["doc"], " ", m["pause"]))
		}
	}

	return points
}

// TestInterleaveSeedReplays: the same seed gives the same interleaving
// points (pauses, their places and lengths, held-back getMores) for a
// single connection's workload; another seed gives others.
func TestInterleaveSeedReplays(t *testing.T) {
	t.Parallel()

	a := interleavePoints(t, 42)
	b := interleavePoints(t, 42)
	c := interleavePoints(t, 43)
	require.NotEmpty(t, a)
	require.Equal(t, a, b)
	require.NotEqual(t, a, c)
}

// TestInterleaveFlags: the devdb command's --interleave and --seed reach the
// server: it logs the seed, and an updateMany is applied one document at a
// time (its statement line, with the documents it read and wrote).
func TestInterleaveFlags(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	cmd := exec.Command(devdbBinary(t), "--addr", "127.0.0.1:0", "--dir", t.TempDir(), "--interleave", "--seed", "77")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	lines := make(chan map[string]any, 1000)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var l map[string]any
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				lines <- l
			}
		}
	}()
	next := func(msg string) map[string]any {
		for l := range lines {
			if l["msg"] == msg {
				return l
			}
		}
		t.Fatalf("devdb ended without logging %q", msg)
		return nil
	}

	require.EqualValues(t, 77, next("interleave: multi-document writes apply one document at a time")["seed"])
	uri := next("devdb listening")["uri"].(string)

	coll := connect(t, uri).Database("flags").Collection("c")
	insertRaceDocs(t, coll)
	res, err := coll.UpdateMany(ctx, bson.D{}, bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "b"}}}})
	require.NoError(t, err)
	require.EqualValues(t, raceDocs, res.ModifiedCount)
	l := next("interleave: statement applied one document at a time")
	require.EqualValues(t, raceDocs, l["ids"])
	require.EqualValues(t, raceDocs, l["n_modified"])
}

// TestInterleaveWithFaults: with --faults too, a write that Interleave
// applies is faulted as a whole, as any write: a stepdown refuses it before
// its first document (nothing written); a writeConcernError comes on the
// reply after its last (everything written).
func TestInterleaveWithFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()

	start := func(faults map[string]float64) (*Server, *observer.ObservedLogs) {
		core, logs := observer.New(zapcore.DebugLevel)
		log := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))
		s, err := Start(ctx, Config{Addr: "127.0.0.1:0", Dir: dir, Logger: log, Interleave: true, Seed: 9, Faults: faults})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() }) // Close may be called again
		return s, logs
	}
	update := bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "b"}}}}

	s, _ := start(nil)
	insertRaceDocs(t, connect(t, s.URI()).Database("faults").Collection("c"))
	require.NoError(t, s.Close())

	s, logs := start(map[string]float64{FaultStepdown: 1})
	coll := connect(t, s.URI()).Database("faults").Collection("c")
	_, err := coll.UpdateMany(ctx, bson.D{}, update)
	var ce mongo.CommandError
	require.ErrorAs(t, err, &ce)
	require.EqualValues(t, 10107, ce.Code)
	n, err := coll.CountDocuments(ctx, bson.D{{Key: "state", Value: "a"}})
	require.NoError(t, err)
	require.EqualValues(t, raceDocs, n, "a refused updateMany wrote nothing")
	require.Zero(t, logs.FilterMessage("interleave: statement applied one document at a time").Len())
	require.NoError(t, s.Close())

	s, logs = start(map[string]float64{FaultWriteConcern: 1})
	coll = connect(t, s.URI()).Database("faults").Collection("c")
	_, err = coll.UpdateMany(ctx, bson.D{}, update)
	var we mongo.WriteException
	require.ErrorAs(t, err, &we)
	require.NotNil(t, we.WriteConcernError)
	require.EqualValues(t, 64, we.WriteConcernError.Code)
	require.Empty(t, we.WriteErrors)
	n, err = coll.CountDocuments(ctx, bson.D{{Key: "state", Value: "b"}})
	require.NoError(t, err)
	require.EqualValues(t, raceDocs, n, "the updateMany wrote every document")
	require.Equal(t, 1, logs.FilterMessage("interleave: statement applied one document at a time").Len())
	require.NoError(t, s.Close())
}

// TestInterleaveOrderedNotBoolean: a multi-document update whose ordered is
// not a boolean (another driver's 1) is left to FerretDB to answer as it
// does without Interleave, and the server goes on answering.
func TestInterleaveOrderedNotBoolean(t *testing.T) {
	t.Parallel()

	s, _ := startInterleaved(t, true, 1)
	db := connect(t, s.URI()).Database("ordered")
	ctx := context.Background()
	_, err := db.Collection("c").InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
	require.NoError(t, err)

	_ = db.RunCommand(ctx, bson.D{
		{Key: "update", Value: "c"},
		{Key: "updates", Value: bson.A{bson.D{
			{Key: "q", Value: bson.D{}}, {Key: "u", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}}, {Key: "multi", Value: true},
		}}},
		{Key: "ordered", Value: int32(1)},
	}).Err()

	n, err := db.Collection("c").CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}
