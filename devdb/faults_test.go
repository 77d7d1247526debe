package devdb

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// faultBundle is what a fault test needs: the server and the faults it
// logged.
type faultBundle struct {
	srv  *Server
	logs *observer.ObservedLogs
}

// injected returns the faults the server logged, as their "fault" fields.
func (b *faultBundle) injected() []string {
	var names []string
	for _, e := range b.logs.FilterMessage("devdb injected a fault").All() {
		names = append(names, e.ContextMap()["fault"].(string))
	}
	return names
}

// startFaults starts a server on dir (a fresh one when "") with cfg's
// Faults, Seed, Elections and Interleave, recording every line it logs, and
// closes it when the test ends.
func startFaults(t *testing.T, dir string, cfg Config) *faultBundle {
	t.Helper()

	if dir == "" {
		dir = t.TempDir()
	}
	core, logs := observer.New(zapcore.DebugLevel)
	cfg.Addr, cfg.Dir = "127.0.0.1:0", dir
	cfg.Logger = zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })

	return &faultBundle{srv: s, logs: logs}
}

// seedDocs writes docs into dir's collection db.c through a server without
// faults, then stops it, so that a test can start one with faults on them.
func seedDocs(t *testing.T, dir string, docs ...any) {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Start(ctx, Config{Addr: "127.0.0.1:0", Dir: dir, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	c, err := mongo.Connect(options.Client().ApplyURI(s.URI()))
	require.NoError(t, err)
	_, err = c.Database("db").Collection("c").InsertMany(ctx, docs)
	require.NoError(t, err)
	require.NoError(t, c.Disconnect(ctx))
	require.NoError(t, s.Close())
}

// commandLog records the commands a client starts, by name.
type commandLog struct {
	mu   sync.Mutex
	cmds []bson.Raw
	name []string
}

func (l *commandLog) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.name = append(l.name, e.CommandName)
		l.cmds = append(l.cmds, append(bson.Raw(nil), e.Command...))
	}}
}

// started returns the commands named name started so far.
func (l *commandLog) started(name string) []bson.Raw {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []bson.Raw
	for i, n := range l.name {
		if n == name {
			out = append(out, l.cmds[i])
		}
	}
	return out
}

// count returns how many documents db.c holds, read with a client of its
// own so that no fault on the test's client gets in the way.
func count(t *testing.T, uri string, filter bson.D) int64 {
	t.Helper()
	n, err := connect(t, uri).Database("db").Collection("c").CountDocuments(context.Background(), filter)
	require.NoError(t, err)
	return n
}

// requireCode requires err to be a command error with the given code and
// name, and returns it.
func requireCode(t *testing.T, err error, code int32, name string) mongo.CommandError {
	t.Helper()
	var ce mongo.CommandError
	require.True(t, errors.As(err, &ce), "want a command error %d %s; got %T: %v", code, name, err, err)
	require.Equal(t, code, ce.Code, "%v", err)
	require.Equal(t, name, ce.Name, "%v", err)
	return ce
}

func TestParseFaults(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		in      string
		want    map[string]float64
		wantErr string
	}{
		{in: "stepdown=0.5", want: map[string]float64{"stepdown": 0.5}},
		{in: "stepdown=1, lostreply=0,cursorkill=0.01", want: map[string]float64{"stepdown": 1, "lostreply": 0, "cursorkill": 0.01}},
		{in: "stepdown", wantErr: `entry "stepdown": want NAME=P`},
		{in: "stepdwn=0.1", wantErr: `unknown fault "stepdwn"; known: stepdown, lostreply, writeconcern, timelimit, cursorkill`},
		{in: "timelimit=1.5", wantErr: "timelimit=1.5: want a probability in [0, 1]"},
		{in: "timelimit=-0.1", wantErr: "timelimit=-0.1: want a probability"},
		{in: "timelimit=NaN", wantErr: "timelimit=NaN: want a probability"},
		{in: "timelimit=x", wantErr: `entry "timelimit=x": probability`},
		{in: "stepdown=0.1,stepdown=0.2", wantErr: "stepdown given twice"},
	} {
		got, err := ParseFaults(tc.in)
		if tc.wantErr != "" {
			require.ErrorContains(t, err, tc.wantErr, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

func TestParseElections(t *testing.T) {
	t.Parallel()

	e, err := ParseElections("60s/8s")
	require.NoError(t, err)
	require.Equal(t, Elections{Every: time.Minute, For: 8 * time.Second}, e)

	for in, want := range map[string]string{
		"60s":      "want EVERY/FOR",
		"x/8s":     "EVERY",
		"60s/y":    "FOR",
		"8s/60s":   "want 0 < FOR < EVERY",
		"60s/60s":  "want 0 < FOR < EVERY",
		"60s/0s":   "want 0 < FOR < EVERY",
		"-1s/10ms": "want 0 < FOR < EVERY",
	} {
		_, err := ParseElections(in)
		require.ErrorContains(t, err, want, in)
	}
}

// TestConfigValidatesFaults: Start refuses a bad Faults or Elections with a
// message that names the field and the entry.
func TestConfigValidatesFaults(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	_, err := Start(ctx, Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", Faults: map[string]float64{"stepdown": 0.1, "lostrepl": 1}})
	require.ErrorContains(t, err, `devdb: Config.Faults: unknown fault "lostrepl"`)

	_, err = Start(ctx, Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", Faults: map[string]float64{"writeconcern": 2}})
	require.ErrorContains(t, err, "devdb: Config.Faults: writeconcern=2: want a probability in [0, 1]")

	_, err = Start(ctx, Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", Elections: Elections{Every: time.Second}})
	require.ErrorContains(t, err, "devdb: Config.Elections: every 1s, for 0s: want 0 < FOR < EVERY")
}

// TestFaultStepdown: every write is refused with NotWritablePrimary before it
// is applied, reads answer. devdb is a standalone, so the driver sends no
// txnNumber and retries nothing, with retryWrites or without; a retryable
// write (one with a txnNumber, as drivers send to a replica set) gets the
// RetryableWriteError label, as from MongoDB 4.4+.
func TestFaultStepdown(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	seedDocs(t, dir, bson.D{{Key: "_id", Value: 1}, {Key: "v", Value: 0}})
	b := startFaults(t, dir, Config{Faults: map[string]float64{FaultStepdown: 1}})
	ctx := context.Background()

	var raw commandLog
	coll := connect(t, b.srv.URI(), options.Client().SetRetryWrites(false).SetMonitor(raw.monitor())).
		Database("db").Collection("c")

	_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 2}})
	ce := requireCode(t, err, 10107, "NotWritablePrimary")
	require.False(t, ce.HasErrorLabel("RetryableWriteError"), "a write without txnNumber is labelled")
	_, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: 1}}}})
	requireCode(t, err, 10107, "NotWritablePrimary")
	err = coll.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: 2}}}}).Err()
	requireCode(t, err, 10107, "NotWritablePrimary")
	_, err = coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: 1}})
	requireCode(t, err, 10107, "NotWritablePrimary")
	_, err = coll.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: 3}}, bson.D{{Key: "_id", Value: 4}}})
	requireCode(t, err, 10107, "NotWritablePrimary")

	// Nothing was applied; reads answer.
	var doc struct{ V int }
	require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: 1}}).Decode(&doc))
	require.Equal(t, 0, doc.V)
	require.Equal(t, int64(1), count(t, b.srv.URI(), bson.D{}))
	require.Len(t, raw.started("insert"), 2)

	// What a docket user sees: the default client (retryWrites on) sends the
	// insert once, without a txnNumber, and gets the same error.
	var def commandLog
	dcoll := connect(t, b.srv.URI(), options.Client().SetMonitor(def.monitor())).Database("db").Collection("c")
	_, err = dcoll.InsertOne(ctx, bson.D{{Key: "_id", Value: 5}})
	requireCode(t, err, 10107, "NotWritablePrimary")
	inserts := def.started("insert")
	require.Len(t, inserts, 1, "the driver retried a write on a standalone")
	_, err = inserts[0].LookupErr("txnNumber")
	require.Error(t, err, "the driver sent a txnNumber to a standalone")

	// A retryable write, as a driver sends it to a replica set.
	err = dcoll.Database().RunCommand(ctx, bson.D{
		{Key: "insert", Value: "c"},
		{Key: "documents", Value: bson.A{bson.D{{Key: "_id", Value: 6}}}},
		{Key: "txnNumber", Value: int64(1)},
	}).Err()
	ce = requireCode(t, err, 10107, "NotWritablePrimary")
	require.True(t, ce.HasErrorLabel("RetryableWriteError"), "labels: %v", ce.Labels)

	require.Equal(t, int64(1), count(t, b.srv.URI(), bson.D{}))
	require.Len(t, b.injected(), 7)
}

// TestFaultLostReply: the write is applied, then the connection closes
// before the reply; the client sees a network error. With retryWrites on,
// the driver labels it RetryableWriteError but, on a standalone, does not
// retry.
func TestFaultLostReply(t *testing.T) {
	t.Parallel()

	b := startFaults(t, "", Config{Faults: map[string]float64{FaultLostReply: 1}})
	ctx := context.Background()

	for _, retry := range []bool{false, true} {
		var cmds commandLog
		coll := connect(t, b.srv.URI(), options.Client().SetRetryWrites(retry).SetMonitor(cmds.monitor())).
			Database("db").Collection("c")

		id := map[bool]int{false: 1, true: 2}[retry]
		_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: id}})
		require.Error(t, err)
		require.True(t, mongo.IsNetworkError(err), "retryWrites=%v: want a network error, got %T: %v", retry, err, err)
		var le mongo.LabeledError
		require.True(t, errors.As(err, &le))
		require.Equal(t, retry, le.HasErrorLabel("RetryableWriteError"), "retryWrites=%v: %v", retry, err)
		require.Len(t, cmds.started("insert"), 1, "retryWrites=%v", retry)

		require.Equal(t, int64(1), count(t, b.srv.URI(), bson.D{{Key: "_id", Value: id}}), "the write was not applied")
	}
	require.Equal(t, []string{FaultLostReply, FaultLostReply}, b.injected())
}

// TestFaultWriteConcern: the write is applied and acknowledged with a
// writeConcernError 64, for a write that waits for replication (majority,
// or MongoDB's default); a w:1 write is not eligible.
func TestFaultWriteConcern(t *testing.T) {
	t.Parallel()

	b := startFaults(t, "", Config{Faults: map[string]float64{FaultWriteConcern: 1}})
	ctx := context.Background()
	db := connect(t, b.srv.URI()).Database("db")

	majority := db.Collection("c", options.Collection().SetWriteConcern(writeconcern.Majority()))
	defaultWC := db.Collection("c")
	one := db.Collection("c", options.Collection().SetWriteConcern(writeconcern.W1()))

	for i, coll := range []*mongo.Collection{majority, defaultWC} {
		_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: i}})
		var we mongo.WriteException
		require.True(t, errors.As(err, &we), "want a WriteException; got %T: %v", err, err)
		require.Empty(t, we.WriteErrors)
		require.NotNil(t, we.WriteConcernError)
		require.Equal(t, 64, we.WriteConcernError.Code)
		require.Equal(t, "WriteConcernFailed", we.WriteConcernError.Name)
		require.Equal(t, "waiting for replication timed out", we.WriteConcernError.Message)
		require.True(t, we.WriteConcernError.Details.Lookup("wtimeout").Boolean(), "errInfo: %v", we.WriteConcernError.Details)
	}

	res, err := majority.UpdateOne(ctx, bson.D{{Key: "_id", Value: 0}}, bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: 1}}}})
	var we mongo.WriteException
	require.True(t, errors.As(err, &we) && we.WriteConcernError != nil, "%v", err)
	require.Nil(t, res, "the driver returns no result beside a write concern error")

	_, err = one.InsertOne(ctx, bson.D{{Key: "_id", Value: 9}})
	require.NoError(t, err, "a w:1 write cannot time out waiting for replication")

	require.Equal(t, int64(3), count(t, b.srv.URI(), bson.D{}))
	require.Equal(t, int64(1), count(t, b.srv.URI(), bson.D{{Key: "v", Value: 1}}), "the update was not applied")
	require.Len(t, b.injected(), 3)
}

// TestFaultTimeLimit: a command that carries maxTimeMS (the driver sets it
// from the context's deadline) is refused, unapplied, with MaxTimeMSExpired
// 50, which the driver makes wrap context.DeadlineExceeded; one without it
// is not eligible.
func TestFaultTimeLimit(t *testing.T) {
	t.Parallel()

	b := startFaults(t, "", Config{Faults: map[string]float64{FaultTimeLimit: 1}})
	coll := connect(t, b.srv.URI()).Database("db").Collection("c")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
	requireCode(t, err, 50, "MaxTimeMSExpired")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.True(t, mongo.IsTimeout(err))

	err = coll.FindOne(ctx, bson.D{}).Err()
	requireCode(t, err, 50, "MaxTimeMSExpired")

	_, err = coll.InsertOne(context.Background(), bson.D{{Key: "_id", Value: 2}})
	require.NoError(t, err, "a command without maxTimeMS is not eligible")

	require.Equal(t, int64(0), count(t, b.srv.URI(), bson.D{{Key: "_id", Value: 1}}), "the refused insert was applied")
	require.Equal(t, []string{FaultTimeLimit, FaultTimeLimit}, b.injected())
}

// TestFaultCursorKill: the first batch arrives, the getMore fails with
// CursorNotFound 43.
func TestFaultCursorKill(t *testing.T) {
	t.Parallel()

	b := startFaults(t, "", Config{Faults: map[string]float64{FaultCursorKill: 1}})
	ctx := context.Background()
	coll := connect(t, b.srv.URI()).Database("db").Collection("c")
	_, err := coll.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}, bson.D{{Key: "_id", Value: 3}}})
	require.NoError(t, err)

	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetBatchSize(2))
	require.NoError(t, err)
	require.True(t, cur.Next(ctx))
	require.True(t, cur.Next(ctx))
	require.False(t, cur.Next(ctx))
	requireCode(t, cur.Err(), 43, "CursorNotFound")
	_ = cur.Close(ctx)

	require.Equal(t, []string{FaultCursorKill}, b.injected())
}

// TestFaultCursorKillKillsTheCursor: the killed cursor is gone on the
// server too: a getMore after the injected one, not itself faulted, fails as
// well, where it would return the next batch had the cursor lived.
func TestFaultCursorKillKillsTheCursor(t *testing.T) {
	t.Parallel()

	// A seed whose first cursorkill decision fires and whose second does not.
	faults := map[string]float64{FaultCursorKill: 0.5}
	var seed int64
	for s := int64(1); seed == 0; s++ {
		in := newInjector(faults, s, Elections{}, zap.NewNop())
		_, first := in.draw(iCursorKill)
		_, second := in.draw(iCursorKill)
		if first && !second {
			seed = s
		}
	}

	b := startFaults(t, "", Config{Faults: faults, Seed: seed})
	ctx := context.Background()
	db := connect(t, b.srv.URI()).Database("db")
	_, err := db.Collection("c").InsertMany(ctx, []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}, bson.D{{Key: "_id", Value: 3}}})
	require.NoError(t, err)

	var found struct {
		Cursor struct {
			ID int64 `bson:"id"`
		} `bson:"cursor"`
	}
	require.NoError(t, db.RunCommand(ctx, bson.D{{Key: "find", Value: "c"}, {Key: "batchSize", Value: 1}}).Decode(&found))
	require.NotZero(t, found.Cursor.ID)

	getMore := bson.D{{Key: "getMore", Value: found.Cursor.ID}, {Key: "collection", Value: "c"}, {Key: "batchSize", Value: 1}}
	requireCode(t, db.RunCommand(ctx, getMore).Err(), 43, "CursorNotFound")
	require.Equal(t, []string{FaultCursorKill}, b.injected())

	err = db.RunCommand(ctx, getMore).Err()
	requireCode(t, err, 43, "CursorNotFound")
	require.Equal(t, []string{FaultCursorKill}, b.injected(), "the second getMore was faulted; want it to reach the backend")
}

// TestFaultsAtZeroNeverFire: a fault at probability 0 never fires, while
// another one is on.
func TestFaultsAtZeroNeverFire(t *testing.T) {
	t.Parallel()

	b := startFaults(t, "", Config{Faults: map[string]float64{
		FaultStepdown: 0, FaultLostReply: 0, FaultWriteConcern: 0, FaultTimeLimit: 0, FaultCursorKill: 1,
	}})
	coll := connect(t, b.srv.URI()).Database("db").Collection("c",
		options.Collection().SetWriteConcern(writeconcern.Majority()))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 20 {
		_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: i}})
		require.NoError(t, err)
		_, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: i}}, bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: i}}}})
		require.NoError(t, err)
		require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: i}}).Err())
	}
	require.Equal(t, int64(20), count(t, b.srv.URI(), bson.D{}))
	require.Empty(t, b.injected())
}

// TestFaultsSameSeedSameFaults: the same seed and the same commands give
// the same faults, the ones the seed's stream decides; another seed gives
// others. Each injected fault is logged with its command, connection and
// draw.
func TestFaultsSameSeedSameFaults(t *testing.T) {
	t.Parallel()

	const n = 12
	faults := map[string]float64{FaultStepdown: 0.5}
	run := func(seed int64) []bool {
		b := startFaults(t, "", Config{Faults: faults, Seed: seed})
		require.Equal(t, seed, b.srv.Seed())
		coll := connect(t, b.srv.URI(), options.Client().SetRetryWrites(false)).Database("db").Collection("c")

		refused := make([]bool, n)
		for i := range n {
			_, err := coll.InsertOne(context.Background(), bson.D{{Key: "_id", Value: i}})
			if err != nil {
				requireCode(t, err, 10107, "NotWritablePrimary")
				refused[i] = true
			}
		}

		var draws []uint64
		for _, e := range b.logs.FilterMessage("devdb injected a fault").All() {
			m := e.ContextMap()
			require.Equal(t, "insert", m["command"])
			require.Equal(t, "c", m["collection"])
			require.NotEmpty(t, m["conn"])
			require.Equal(t, seed, m["seed"])
			draws = append(draws, m["draw"].(uint64))
		}
		var want []uint64
		for i, r := range refused {
			if r {
				want = append(want, uint64(i+1))
			}
		}
		require.Equal(t, want, draws, "the log does not name the refused inserts")
		return refused
	}

	// What the seed's stream decides.
	expect := func(seed int64) []bool {
		in := newInjector(faults, seed, Elections{}, zap.NewNop())
		out := make([]bool, n)
		for i := range out {
			_, out[i] = in.draw(iStepdown)
		}
		return out
	}

	first := run(42)
	require.Equal(t, expect(42), first)
	require.Contains(t, first, true)
	require.Contains(t, first, false)
	require.Equal(t, first, run(42))
	require.NotEqual(t, first, expect(43))
	require.Equal(t, expect(43), run(43))
}

// TestElections: in an election window a write is refused with
// NotWritablePrimary and a read answers; after it a write succeeds. Each
// check counts only when its whole round trip lay in (or, for the last,
// outside) a window, so a slow machine makes the test wait for another
// window rather than fail.
func TestElections(t *testing.T) {
	t.Parallel()

	el := Elections{Every: 400 * time.Millisecond, For: 250 * time.Millisecond}
	b := startFaults(t, "", Config{Elections: el})
	in := b.srv.front.cfg.faults
	ctx := context.Background()
	inWindow := func(t0, t1 time.Time) bool {
		w0, ok0 := in.inElection(t0)
		w1, ok1 := in.inElection(t1)
		return ok0 && ok1 && w0 == w1
	}
	outside := func(t0, t1 time.Time) bool {
		_, ok0 := in.inElection(t0)
		_, ok1 := in.inElection(t1)
		return !ok0 && !ok1 && t1.Sub(t0) < el.Every-el.For
	}
	// A fresh client per write: after NotWritablePrimary the driver marks the
	// server unknown until its next check, up to 500 ms later.
	newColl := func() *mongo.Collection {
		c := connect(t, b.srv.URI(), options.Client().SetRetryWrites(false))
		require.NoError(t, c.Ping(ctx, nil))
		return c.Database("db").Collection("c")
	}
	reader := newColl()

	var readIn, refusedIn, acceptedOut int
	for id := 0; (readIn == 0 || refusedIn == 0 || acceptedOut == 0) && id < 20; id++ {
		w1, w2 := newColl(), newColl()
		waitFor(t, func() bool { _, ok := in.inElection(time.Now()); return ok })

		t0 := time.Now()
		_, err := reader.CountDocuments(ctx, bson.D{})
		require.NoError(t, err, "a read in an election window")
		if inWindow(t0, time.Now()) {
			readIn++
		}

		t0 = time.Now()
		_, err = w1.InsertOne(ctx, bson.D{{Key: "_id", Value: 2 * id}})
		if inWindow(t0, time.Now()) {
			requireCode(t, err, 10107, "NotWritablePrimary")
			require.Zero(t, count(t, b.srv.URI(), bson.D{{Key: "_id", Value: 2 * id}}), "a refused write was applied")
			refusedIn++
		}

		waitFor(t, func() bool { _, ok := in.inElection(time.Now()); return !ok })
		t0 = time.Now()
		_, err = w2.InsertOne(ctx, bson.D{{Key: "_id", Value: 2*id + 1}})
		if outside(t0, time.Now()) {
			require.NoError(t, err, "a write after the window")
			acceptedOut++
		}
	}
	require.Positive(t, readIn, "no read ran wholly inside a window")
	require.Positive(t, refusedIn, "no write ran wholly inside a window")
	require.Positive(t, acceptedOut, "no write ran wholly between windows")
	require.Contains(t, b.injected(), faultElection)
}

// waitFor polls cond until it holds, for at most a minute.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within a minute")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFaultElemMatchNot: a filter with $not or $ne inside an $elemMatch, at
// any depth, is refused unrun with NotImplemented 238, as FerretDB v1
// refuses it; other filters, $elemMatch without them included, run.
func TestFaultElemMatchNot(t *testing.T) {
	t.Parallel()

	b := startFaults(t, "", Config{Faults: map[string]float64{FaultElemMatchNot: 1}})
	ctx := context.Background()
	coll := connect(t, b.srv.URI()).Database("db").Collection("c")
	_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "w", Value: bson.A{"a"}}})
	require.NoError(t, err)

	notIn := bson.D{{Key: "w", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$elemMatch", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$in", Value: bson.A{"a"}}}}}}}}}}}
	_, err = coll.UpdateMany(ctx, notIn, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}})
	requireCode(t, err, 238, "NotImplemented")
	err = coll.FindOne(ctx, bson.D{{Key: "$or", Value: bson.A{bson.D{{Key: "w", Value: bson.D{{Key: "$elemMatch", Value: bson.D{{Key: "$ne", Value: "b"}}}}}}}}}).Err()
	requireCode(t, err, 238, "NotImplemented")

	require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "w", Value: bson.D{{Key: "$elemMatch", Value: bson.D{{Key: "$in", Value: bson.A{"a"}}}}}}}).Err())
	require.Equal(t, int64(0), count(t, b.srv.URI(), bson.D{{Key: "x", Value: 1}}), "the refused update was applied")
	require.Equal(t, []string{FaultElemMatchNot, FaultElemMatchNot}, b.injected())
}
