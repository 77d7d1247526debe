package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docketq/docket/configs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.uber.org/zap"
)

// connect returns a client for the configured server, watched by mon when
// it is not nil. The driver connects lazily, so this fails only on a
// malformed URI.
func connect(cfg configs.MongoConfig, mon *event.CommandMonitor) (*mongo.Client, error) {
	opts := cfg.ClientOptions()
	if mon != nil {
		opts.SetMonitor(mon)
	}
	client, err := mongo.Connect(opts)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %s", configs.RedactURI(cfg.URI), configs.Redact(err.Error(), cfg.URI))
	}
	return client, nil
}

// waitForServer pings and runs setup until both succeed or ctx ends,
// logging one line per backoff step. A setup the server refused for what
// is in the database (queue.ErrSetupRefused) is not retried: it returns
// that error, redacted, at once.
func waitForServer(ctx context.Context, client *mongo.Client, cfg configs.MongoConfig, log *zap.Logger, setup func(context.Context) error) error {
	backoff := time.Duration(0)
	for {
		pctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		err := client.Ping(pctx, readpref.Primary())
		reached := err == nil
		if reached {
			err = setup(pctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if reached && (errors.Is(err, queue.ErrSetupRefused) || mongo.IsDuplicateKeyError(err)) {
			return fmt.Errorf("%w: %s", queue.ErrSetupRefused, configs.Redact(err.Error(), cfg.URI))
		}
		backoff = min(max(2*backoff, 500*time.Millisecond), 10*time.Second)
		msg := "database not reachable; retrying"
		if reached {
			msg = "database reachable but setting it up failed; retrying"
		}
		log.Warn(msg,
			zap.String("uri", configs.RedactURI(cfg.URI)),
			zap.String("error", configs.Redact(err.Error(), cfg.URI)),
			zap.Duration("retry_in", backoff))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
	}
}
