package handlers

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// runPass is a scheduled pass's Run: one pass of at most a minute, its
// error logged as what failed ("ledger sweep": "ledger sweep failed").
func runPass[T any](log *zap.Logger, what string, pass func(context.Context) (T, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := pass(ctx); err != nil {
		log.Warn(what+" failed; it runs again on schedule", zap.Error(err))
	}
}
