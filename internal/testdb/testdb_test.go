package testdb

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/docketq/docket/internal/testdb/devdbproc"
)

func TestMain(m *testing.M) {
	Main(m)
}

var validName = regexp.MustCompile(`^[a-zA-Z0-9_]+$`)

func TestNewDBGivesIsolatedDatabases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	a, b := NewDB(t), NewDB(t)
	require.NotEqual(t, a.Name(), b.Name())

	_, err := a.Collection("things").InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
	require.NoError(t, err)

	n, err := a.Collection("things").CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)

	n, err = b.Collection("things").CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.Zero(t, n, "a write to one test database shows in another")
}

func TestNewDBWorksInParallel(t *testing.T) {
	t.Parallel()

	for i := range 4 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			coll := NewDB(t).Collection("jobs")

			// The same _id in every subtest: no duplicate key errors, since
			// each has a database of its own.
			_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "job"}, {Key: "subtest", Value: i}})
			require.NoError(t, err)

			var got struct {
				Subtest int `bson:"subtest"`
			}
			require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: "job"}}).Decode(&got))
			require.Equal(t, i, got.Subtest)
		})
	}
}

func TestNewDBDropsTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	var name string
	t.Run("uses", func(t *testing.T) {
		db := NewDB(t)
		name = db.Name()
		_, err := db.Collection("c").InsertOne(ctx, bson.D{{Key: "a", Value: 1}})
		require.NoError(t, err)

		names, err := Client(t).ListDatabaseNames(ctx, bson.D{})
		require.NoError(t, err)
		require.Contains(t, names, name)
	})

	names, err := Client(t).ListDatabaseNames(ctx, bson.D{})
	require.NoError(t, err)
	require.NotContains(t, names, name)
}

func TestDBName(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		test   string
		prefix string
	}{
		{test: "TestClaim", prefix: "TestClaim_"},
		{test: "TestClaim/empty_queue", prefix: "TestClaim_empty_queue_"},
		{test: "TestRetry/attempt=3,_backoff=1s#01", prefix: "TestRetry_attempt_3__backoff_1s_"},
		{test: "TestÜber", prefix: "Test_ber_"},
		{test: strings.Repeat("TestVeryLong", 10), prefix: strings.Repeat("TestVeryLong", 10)[:31] + "_"},
		{test: "", prefix: "test_"},
	} {
		t.Run(tc.test, func(t *testing.T) {
			name := dbName(tc.test)
			require.LessOrEqual(t, len(name), MaxDBNameLen)
			require.Regexp(t, validName, name)
			require.True(t, strings.HasPrefix(name, tc.prefix), "%q does not start with %q", name, tc.prefix)
			require.NotEqual(t, name, dbName(tc.test), "names differ between calls")
		})
	}

	// t.Name() of this very subtest, as NewDB would see it.
	t.Run("from t", func(t *testing.T) {
		require.True(t, strings.HasPrefix(dbName(t.Name()), "TestDBName_from_t_"))
	})
}

func TestStartDevDBKeepsDataAcrossRestarts(t *testing.T) {
	SkipOnRealMongo(t, "stops, kills and restarts a devdb of its own")
	t.Parallel()
	ctx := context.Background()

	d := StartDevDB(t, "")
	uri := d.URI()

	count := func() int64 {
		t.Helper()
		c := connectTo(t, d.URI())
		n, err := c.Database("keep").Collection("jobs").CountDocuments(ctx, bson.D{})
		require.NoError(t, err)
		return n
	}
	insert := func(id int) {
		t.Helper()
		c := connectTo(t, d.URI())
		_, err := c.Database("keep").Collection("jobs").InsertOne(ctx, bson.D{{Key: "_id", Value: id}})
		require.NoError(t, err)
	}

	insert(1)

	// A clean stop and start.
	d.Restart()
	require.Equal(t, uri, d.URI(), "same port after a restart")
	require.Equal(t, int64(1), count())

	// A crash: acknowledged writes survive SIGKILL.
	insert(2)
	d.Kill()
	d.Restart()
	require.Equal(t, int64(2), count())

	// While stopped, the server is unreachable.
	d.Stop()
	c := connectTo(t, d.URI())
	pingCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	require.Error(t, c.Ping(pingCtx, nil))

	d.Restart()
	require.Equal(t, int64(2), count())
}

// TestDevDBFlagsReachDevDB: the flags in DOCKET_DEVDB_FLAGS reach the devdb
// that testdb starts: with --faults stepdown=1 every write is refused with
// NotWritablePrimary and reads answer; bad flags fail the start, naming the
// entry. Not parallel: it sets the environment.
func TestDevDBFlagsReachDevDB(t *testing.T) {
	ctx := context.Background()

	t.Setenv(EnvDevDBFlags, " --faults stepdown=1   --seed 3 ")
	require.Equal(t, []string{"--faults", "stepdown=1", "--seed", "3"}, DevDBFlags())

	d := StartDevDB(t, "")
	coll := connectTo(t, d.URI()).Database("flags").Collection("c")
	_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
	var ce mongo.CommandError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, int32(10107), ce.Code, "%v", err)
	n, err := coll.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.Zero(t, n)

	t.Setenv(EnvDevDBFlags, "--faults stepdwn=1")
	_, err = devdbproc.Start(DevDBBinary(t), "127.0.0.1:0", t.TempDir(), startTimeout, DevDBFlags()...)
	require.ErrorContains(t, err, `unknown fault "stepdwn"`)

	t.Setenv(EnvDevDBFlags, "")
	require.Empty(t, DevDBFlags())
}

func TestBuildBinaryBuildsOnce(t *testing.T) {
	SkipOnRealMongo(t, "builds devdb")
	t.Parallel()

	if os.Getenv(EnvDevDBBin) != "" {
		t.Skipf("%s is set: devdb is not built", EnvDevDBBin)
	}

	first := DevDBBinary(t)
	start := time.Now()
	again := BuildBinary(t, DevDBPackage, false)
	require.Equal(t, first, again)
	require.Less(t, time.Since(start), time.Second, "the second call does not build again")
}

// connectTo returns a client of uri, disconnected when the test ends.
func connectTo(t *testing.T, uri string) *mongo.Client {
	t.Helper()

	c, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(5 * time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })

	return c
}
