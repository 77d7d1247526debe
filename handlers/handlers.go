package handlers

import (
	"context"
	"errors"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
)

// Deps are what handlers need: the database holding their data (the same
// one as the jobs) and the queue, for handlers that enqueue follow-ups.
type Deps struct {
	DB     *mongo.Database
	Queue  *queue.Client
	Logger *zap.Logger
	// Hook, when set, is called after each write of a handler with the
	// name of the step just written; an error stops the handler there, as
	// a crash would. Tests inject crashes with it; nil in production.
	Hook func(ctx context.Context, step string) error
}

// step reports that the write named step is done, giving a test hook the
// chance to stop the handler there.
func (d Deps) step(ctx context.Context, name string) error {
	if d.Hook == nil {
		return nil
	}
	return d.Hook(ctx, name)
}

func (d Deps) logger() *zap.Logger {
	if d.Logger == nil {
		return zap.NewNop()
	}
	return d.Logger
}

// Register adds every docket handler to reg, and their cancel hooks to
// d.Queue (CancelHooks).
func Register(reg *jobs.Registry, d Deps) error {
	if d.DB == nil || d.Queue == nil {
		return errors.New("handlers: Deps needs DB and Queue")
	}
	CancelHooks(d.Queue, d.DB)
	return errors.Join(
		jobs.Register(reg, Noop, jobs.KindOptions{}),
		registerAddFriend(reg, d),
		registerRename(reg, d),
		registerTransfer(reg, d),
		registerTree(reg, d),
		registerLedger(reg, d),
		registerOrder(reg, d),
	)
}

// Setup creates the indexes the handlers' collections need. It is
// idempotent; workers run it at start.
func Setup(ctx context.Context, db *mongo.Database) error {
	return errors.Join(
		setupAddFriend(ctx, db),
		setupRename(ctx, db),
		setupTransfer(ctx, db),
		setupTree(ctx, db),
		setupLedger(ctx, db),
	)
}

// closeCursor closes cur even when ctx has ended (a pass stopped by its
// deadline or a stop), within five seconds: cur.Close(ctx) would then send
// no killCursors and leave the cursor open on the server until its
// timeout.
func closeCursor(ctx context.Context, cur *mongo.Cursor) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = cur.Close(ctx)
}
