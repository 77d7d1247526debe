# docket: `make run` starts the demo on the embedded server, `make test` runs
# every test. Both need only Go (and, for the cross-language test, what
# .ci/run installs).

GO      ?= go
BIN     := bin
PKGS    := ./cmd/worker ./cmd/enqueue ./cmd/docketctl

.PHONY: all build run test vet race-free clean bench chaos

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(PKGS)
	cd devdb && GOWORK=$$(GO=$(GO) _overlay/workspace.sh) $(GO) build -o ../$(BIN)/ ./cmd/devdb

# Builds everything, starts devdb (unless DOCKET_MONGO_URI is set), two
# workers (each serving /metrics, /healthz and /readyz), the dashboard and a
# demo batch, prints their URLs, and shows the jobs being processed until
# Ctrl-C. DOCKET_DASHBOARD_PORT (8080) and DOCKET_METRICS_PORT (9101) move
# the ports; a busy one is skipped for the next free one.
run: build
	@scripts/run.sh

# go vet, then every test under the race detector, of docket's module and
# of the devdb module (devdb/, the embedded server, a module of its own so
# that docket's module graph holds no FerretDB). Among them the short chaos
# run, plain and on a devdb answering as a replica set does (all faults,
# elections and --interleave at once, seed 1; see `make chaos`).
test:
	@scripts/test-deps.sh
	$(GO) vet ./...
	cd devdb && $(GO) vet ./...
	@GO=$(GO) scripts/test.sh

# Throughput, commands per job, latency, idle cost and scaling on a devdb of
# its own (8 minutes on 2 quiet vCPUs, 12 under a load of 11-17:
# burn-downs of 3,000 jobs, 1,600 with single claims); BENCH_FLAGS="--json", "--runs default,steady" or "--mongo-uri ..." to vary.
# BENCH_FLAGS="--runs growth" measures how cost grows with the backlog (300 to
# 100,000 jobs, and beside 1,000,000 finished ones), stopping itself within
# --growth-budget (10 minutes) and saying which points it skipped.
# Results and targets: docs/BENCHMARKS.md.
bench: build
	$(GO) build -o $(BIN)/ ./cmd/bench
	$(BIN)/bench $(BENCH_FLAGS)

clean:
	rm -rf $(BIN) .docket

# The long chaos run (a short one runs in `make test`): 4 worker processes
# SIGKILLed, SIGSTOPped and cut off from devdb under a mixed load, then every
# invariant checked; the same on a devdb that answers as a replica set does
# (TestChaosUnderFaults: each of --faults stepdown, lostreply, writeconcern,
# timelimit, cursorkill, elemmatchnot, --elections and --interleave alone at seed 1, then
# all at once at seeds 1 and 2: about 50 minutes); and the schedule harnesses with
# every schedule (every three-attempt one, every world with every
# two-attempt one; and every periodic schedule). DOCKET_CHAOS_SEED=N replays
# a chaos run, DOCKET_CHAOS_SEEDS="1 2 3" picks the seeds; a failed run's
# last line is the command that replays it.
chaos:
	DOCKET_HARNESS=full $(GO) test -run '^TestHarness$$' -count=1 -v -timeout 20m ./handlers/
	DOCKET_HARNESS=full $(GO) test -run '^TestPeriodicHarness$$' -count=1 -v -timeout 10m ./recovery/
	DOCKET_CHAOS=long $(GO) test -run '^TestChaos$$' -count=1 -v -timeout 20m ./cmd/internal/e2e/
	DOCKET_CHAOS=long $(GO) test -run '^TestChaosUnderFaults$$' -count=1 -v -timeout 150m ./cmd/internal/e2e/
