//go:build linux

package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/cmd/internal/chaos"
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
	cfg := chaosConfig(t)
	if seeds := chaosSeeds(t); seeds != nil {
		cfg.Seed = seeds[0]
	}
	chaos.Run(t, cfg)
}

// chaosFaults are the behaviours TestChaosUnderFaults runs the chaos
// under, each a set of devdb flags (docs/EMBEDDED-SERVER.md) besides
// --seed; the last, MongoDB's all at once, is the short form. elemmatchnot
// is FerretDB v1's refusal of a settle's release of several parents'
// dependents: under it the settles do without (the other runs send it). An election
// lasts less than the run's 2 s lease, as one of seconds does against
// leases of 30 s: a longer one expires every lease at every election.
var chaosFaults = []struct{ name, flags string }{
	{"stepdown", "--faults stepdown=0.02"},
	{"lostreply", "--faults lostreply=0.02"},
	{"writeconcern", "--faults writeconcern=0.02"},
	{"timelimit", "--faults timelimit=0.02"},
	{"cursorkill", "--faults cursorkill=0.1"},
	{"elemmatchnot", "--faults elemmatchnot=1"},
	{"elections", "--elections 20s/1500ms"},
	{"interleave", "--interleave"},
	{"all", "--faults stepdown=0.01,lostreply=0.01,writeconcern=0.01,timelimit=0.01,cursorkill=0.05 --elections 20s/1500ms --interleave"},
}

// TestChaosUnderFaults is TestChaos on a devdb that answers as a replica
// set does: multi-document writes applied one document at a time among
// other writes (--interleave), MongoDB's failure replies (--faults) and
// elections, each seeded by the run's seed, so that a failure replays
// with the command its last line prints. The short form (`make test`)
// runs all of them at once at seed 1; DOCKET_CHAOS=long (`make chaos`)
// runs each alone at seed 1 and all at once at seeds 1 and 2.
// DOCKET_CHAOS_SEEDS (or DOCKET_CHAOS_SEED) picks the seeds instead.
// Skipped when DOCKET_DEVDB_FLAGS is set: TestChaos runs under those.
func TestChaosUnderFaults(t *testing.T) {
	testdb.SkipOnRealMongo(t, "its outages stop and restart a devdb of its own")
	if f := os.Getenv(testdb.EnvDevDBFlags); f != "" {
		t.Skipf("%s=%q is set: TestChaos runs under it", testdb.EnvDevDBFlags, f)
	}
	runs, long := chaosFaults[len(chaosFaults)-1:], os.Getenv("DOCKET_CHAOS") == "long"
	if long {
		runs = chaosFaults
	}
	for _, run := range runs {
		seeds := chaosSeeds(t)
		switch {
		case seeds != nil:
		case long && run.name == "all":
			seeds = []uint64{1, 2}
		default:
			seeds = []uint64{1}
		}
		for _, seed := range seeds {
			name := fmt.Sprintf("%s-seed%d", run.name, seed)
			t.Run(name, func(t *testing.T) {
				flags := fmt.Sprintf("%s --seed %d", run.flags, seed)
				t.Setenv(testdb.EnvDevDBFlags, flags)
				cfg := chaosConfig(t)
				cfg.Seed = seed
				cfg.Replay = fmt.Sprintf("DOCKET_CHAOS_SEED=%d go test -count=1 -run '^TestChaosUnderFaults$/^%s$' ./cmd/internal/e2e/, devdb %s", seed, name, flags)
				chaos.Run(t, cfg)
			})
		}
	}
}

// chaosConfig is the short run, or the long one with DOCKET_CHAOS=long.
func chaosConfig(t *testing.T) chaos.Config {
	t.Helper()
	if os.Getenv("DOCKET_CHAOS") == "long" {
		return chaos.Config{Jobs: 500, Waves: 8, Drain: 5 * time.Minute}
	}
	return chaos.Config{Jobs: 200, Waves: 4, Outage: 5 * time.Second, Drain: 150 * time.Second}
}

// chaosSeeds are the seeds of DOCKET_CHAOS_SEEDS (separated by spaces or
// commas), or else DOCKET_CHAOS_SEED's; nil when neither is set.
func chaosSeeds(t *testing.T) []uint64 {
	t.Helper()
	v := os.Getenv("DOCKET_CHAOS_SEEDS")
	if v == "" {
		v = os.Getenv("DOCKET_CHAOS_SEED")
	}
	var seeds []uint64
	for _, s := range strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == ',' }) {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("DOCKET_CHAOS_SEED(S): %q: %v", s, err)
		}
		seeds = append(seeds, seed)
	}
	return seeds
}
