//go:build linux

package e2e

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/docketq/docket/internal/chaos"
	"github.com/docketq/docket/internal/testdb"
)

// TestChaos runs docket under SIGKILLs, two SIGSTOPs past the lease (a
// short one, and a long one that lasts until other workers have finished
// the stopped worker's jobs) and a devdb outage while a mixed load runs
// (transfers, friendships, renames, ledger transfers and cancels, tree
// publishes, with readers checking every tree snapshot they read, and
// flash-sale orders into a bounded queue, sampled all the while, and
// the transfers under a concurrency limit of 2, bursts of noop jobs
// under a rate limit and of record jobs under a partition limit of 2 per
// customer, all sampled too, and workflows: chains, a fan-in,
// a diamond, a failing task and a runs-anyway one), then checks every job
// and every handler invariant from the database (internal/chaos), for the
// workflows that no task started before its parents succeeded, none was
// lost and none succeeded twice. The short form runs in `make test`;
// DOCKET_CHAOS=long (`make chaos`) runs the long one. DOCKET_CHAOS_SEED
// replays a run's load and schedule of failures.
//
// Not parallel: it measures whether docket rides out failures, and a
// server shared with other tests would only slow the drain.
func TestChaos(t *testing.T) {
	testdb.SkipOnRealMongo(t, "its outages stop and restart a devdb of its own")
	cfg := chaos.Config{Jobs: 200, Waves: 4, Outage: 5 * time.Second, Drain: 150 * time.Second}
	if os.Getenv("DOCKET_CHAOS") == "long" {
		cfg = chaos.Config{Jobs: 500, Waves: 8, Drain: 5 * time.Minute}
	}
	if s := os.Getenv("DOCKET_CHAOS_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("DOCKET_CHAOS_SEED: %q: %v", s, err)
		}
		cfg.Seed = seed
	}
	chaos.Run(t, cfg)
}
