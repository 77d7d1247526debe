// Command bench measures docket: throughput, commands per job, latency,
// idle cost and scaling over worker processes, against a raw
// findAndModify loop on the same server in the same run; with --runs
// growth, how both grow with the backlog, within a time budget. It starts
// its own devdb unless --mongo-uri is given. `bench --help` lists the runs' sizes;
// docs/BENCHMARKS.md has the results.
package main

import (
	"os"

	"github.com/docketq/docket/cmd/internal/bench"
)

func main() {
	os.Exit(bench.Main(os.Args[1:], os.Stdout, os.Stderr))
}
