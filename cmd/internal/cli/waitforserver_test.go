package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/configs"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// TestWaitForServerClassifiesSetupErrors: issue 10 scenario 11. A server
// that refuses docket's setup (duplicates under a unique index) ends the
// wait at once with queue.ErrSetupRefused naming the duplicates, instead of
// "database not reachable; retrying" forever; any other setup error is
// retried, and says the server was reached.
func TestWaitForServerClassifiesSetupErrors(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	cfg := configs.MongoConfig{URI: testdb.URI(), DB: db.Name(), Timeout: 10 * time.Second}
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	for _, id := range []string{"a", "b"} {
		_, err := store.Of(q).Collection().InsertOne(context.Background(), bson.D{{Key: "_id", Value: id}, {Key: "uniqueKey", Value: "twice"}})
		require.NoError(t, err)
	}

	core, logs := observer.New(zapcore.DebugLevel)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = waitForServer(ctx, db.Client(), cfg, zap.New(core), q.EnsureIndexes)
	require.ErrorIs(t, err, queue.ErrSetupRefused)
	require.ErrorContains(t, err, `"twice" in 2 documents`)
	// A first try may fail for another reason (the server busy) and be
	// retried; the refusal itself never is.
	for _, e := range logs.TakeAll() {
		require.NotContains(t, e.ContextMap()["error"], "twice", "a refused setup is not retried: %s", e.Message)
	}

	// Any other failure is retried until the context ends.
	ctx, cancel = context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	err = waitForServer(ctx, db.Client(), cfg, zap.New(core), func(context.Context) error { return os.ErrPermission })
	require.True(t, errors.Is(err, context.DeadlineExceeded), "got %v", err)
	// The setup's own error is retried as "reachable"; a ping that fails
	// under load in between may be logged as "not reachable", but never
	// with the setup's error.
	var setupRetries int
	for _, e := range logs.TakeAll() {
		if !strings.Contains(fmt.Sprint(e.ContextMap()["error"]), os.ErrPermission.Error()) {
			continue
		}
		require.Equal(t, "database reachable but setting it up failed; retrying", e.Message)
		setupRetries++
	}
	require.NotZero(t, setupRetries)
}
