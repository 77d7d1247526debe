// Command enqueue adds jobs to docket's queue from a shell: one job of any
// kind, many from JSON lines, or a handler's job from its own flags; it
// prints the ids it made. It also cancels jobs and shows their state.
package main

import (
	"os"

	"github.com/docketq/docket/cmd/internal/cli"
)

func main() {
	os.Exit(cli.Enqueue(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
