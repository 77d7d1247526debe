package cli

import (
	"context"
	"fmt"

	"github.com/docketq/docket/configs"
	"github.com/docketq/docket/queue"
	"go.uber.org/zap"
)

// applyCapacities sets the capacity of each queue caps names, as a worker
// starts. Every start writes them again, the same write for every worker
// that has the same file, so workers starting together agree and the last
// start wins over `docketctl capacity`; a queue caps does not name is left
// as it is.
func applyCapacities(ctx context.Context, q *queue.Client, caps configs.Capacities, by string, log *zap.Logger) error {
	for _, name := range caps.Names() {
		if err := q.SetCapacity(ctx, name, caps[name], by); err != nil {
			return fmt.Errorf("capacities.%s: %w", name, err)
		}
		log.Info("queue capacity set from the configuration", zap.String("queue", name), zap.Int("capacity", caps[name]))
	}
	return nil
}
