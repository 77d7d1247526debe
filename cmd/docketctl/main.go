// Command docketctl is the operator's command: it shows what the queue
// holds and acts on jobs (retry, cancel, delete, purge), each action
// conditioned on the state it was decided on and never touching a running
// job.
package main

import (
	"os"

	"github.com/docketq/docket/cmd/internal/cli"
)

func main() {
	os.Exit(cli.Ctl(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
