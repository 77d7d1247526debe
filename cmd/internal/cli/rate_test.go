package cli

import (
	"context"
	"testing"

	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestRateCommands: `docketctl limit rate kind:k 1/h --burst 2` sets a
// rate that claims then obey; bad input exits 2; `limit` and stats show
// the burst used, the next start and the jobs waiting; a malformed rate
// another app wrote is shown escaped; `limit rate kind:k off` clears it.
func TestRateCommands(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	ctx := context.Background()

	out, errs, code := runCtl(t, uri, db, "limit", "rate", "kind:k", "1/h", "--burst", "2")
	require.Zero(t, code, errs)
	require.Contains(t, out, "kind:k\trate 1/h burst 2")
	for _, bad := range [][]string{{"limit", "rate", "kind:k"}, {"limit", "rate", "k", "1/s"}, {"limit", "rate", "kind:k", "fast"}, {"limit", "rate", "kind:k", "1/s", "--burst", "0"}, {"limit", "rate", "kind:k", "off", "--burst", "3"}} {
		_, errs, code = runCtl(t, uri, db, bad...)
		require.Equal(t, 2, code, "%v: %s", bad, errs)
	}

	_, got := enqueueAndClaim(t, db, 5) // limit_test.go
	require.Len(t, got, 2, "the burst holds")

	out, errs, code = runCtl(t, uri, db, "limit")
	require.Zero(t, code, errs)
	require.Regexp(t, `(?m)^rate\s+limit\s+use\s+set\n(.*\n)*kind:k\s+1/h burst 2\s+burst 2 / 2 used, next start in \S+, 2 started\s+\S+ by `, out)
	out, errs, code = runCtl(t, uri, db, "stats", "--exact")
	require.Zero(t, code, errs)
	require.Regexp(t, `rate kind:k: 1/h burst 2, burst 2 / 2 used, next start in \S+, 3 waiting`, out)
	out, errs, code = runCtl(t, uri, db, "stats", "--exact", "--json")
	require.Zero(t, code, errs)
	require.Contains(t, out, `"rates": [`)
	require.Contains(t, out, `"burstUsed": 2`)
	require.Contains(t, out, `"waiting": 3`)

	_, err := db.Collection("limits").InsertOne(ctx, bson.D{{Key: "_id", Value: "rate:kind:\x1b[31mred"}, {Key: "rate", Value: "\x1b[2J"}})
	require.NoError(t, err)
	out, errs, code = runCtl(t, uri, db, "limit")
	require.Zero(t, code, errs)
	require.NotContains(t, out, "\x1b")
	require.Contains(t, out, "malformed, limits nothing")

	out, errs, code = runCtl(t, uri, db, "limit", "rate", "kind:k", "off")
	require.Zero(t, code, errs)
	require.Contains(t, out, "kind:k\tno rate limit")
}

// TestRateCommandsPartitioned: `docketctl limit rate kind:k 1/h --burst 2
// --per customerId` (or the rate in words) sets a partitioned rate;
// `limit` and stats show its partitions with state and those spent.
func TestRateCommandsPartitioned(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()

	out, errs, code := runCtl(t, uri, db, "limit", "rate", "kind:k", "1/h", "burst", "2", "per", "customerId")
	require.Zero(t, code, errs)
	require.Contains(t, out, "kind:k\trate 1/h burst 2 per customerId")
	out, errs, code = runCtl(t, uri, db, "limit", "rate", "kind:k", "1/h", "--burst", "2", "--per", "customerId")
	require.Zero(t, code, errs)
	require.Contains(t, out, "kind:k\trate 1/h burst 2 per customerId")
	for _, bad := range [][]string{{"limit", "rate", "kind:k", "1/h", "--per", "$x"}, {"limit", "rate", "kind:k", "off", "--per", "c"}, {"limit", "rate", "kind:k", "1/h", "--per"}, {"limit", "rate", "kind:k", "1/h", "--per="}, {"limit", "rate", "kind:k", "1/h", "--burst="}} {
		_, errs, code = runCtl(t, uri, db, bad...)
		require.Equal(t, 2, code, "%v: %s", bad, errs)
	}

	_, got := enqueueAndClaim(t, db, 5) // no customerId: one partition, of null
	require.Len(t, got, 2, "the partition's burst holds")
	out, errs, code = runCtl(t, uri, db, "limit")
	require.Zero(t, code, errs)
	require.Regexp(t, `kind:k\s+1/h burst 2 per customerId\s+1 partitions with state, 1 spent, 2 started`, out)
	out, errs, code = runCtl(t, uri, db, "stats", "--exact")
	require.Zero(t, code, errs)
	require.Contains(t, out, "rate kind:k: 1/h burst 2 per customerId, 1 partitions with state, 1 spent, 3 waiting")
	out, errs, code = runCtl(t, uri, db, "stats", "--exact", "--json")
	require.Zero(t, code, errs)
	require.Contains(t, out, `"partitionBy": "customerId"`)
	require.Contains(t, out, `"spent": 1`)
}
