// Command realmongo is the Go part of scripts/test-mongo.sh, which runs
// docket's tests against a real MongoDB:
//
//	realmongo check [--allow-standalone] URI
//
// checks that the server at URI answers, is a replica set (or a sharded
// cluster's mongos) and lets the suite create and drop a database, and says
// whether retryable writes are on; exit status 1 when it is not fit.
//
//	go test -json ./... | realmongo report
//
// prints go test's usual lines (each package's result, the output of the
// tests that fail), then every test that skipped and why, with the
// credentials of DOCKET_TEST_MONGO_URI hidden wherever a line shows them;
// exit status 1 when a test or a build failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

// checkTimeout bounds the whole check: connecting, hello, buildInfo and
// the probe database.
const checkTimeout = 30 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: realmongo check [--allow-standalone] URI | realmongo report < go-test-json")
		return 2
	}
	switch args[0] {
	case "check":
		fs := flag.NewFlagSet("check", flag.ContinueOnError)
		fs.SetOutput(stderr)
		allow := fs.Bool("allow-standalone", false, "run on a server that is not a replica set")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if fs.NArg() != 1 {
			fmt.Fprintln(stderr, "usage: realmongo check [--allow-standalone] URI")
			return 2
		}
		ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		defer cancel()
		if err := check(ctx, fs.Arg(0), *allow, stdout); err != nil {
			fmt.Fprintf(stderr, "test-mongo: %v\n", err)
			return 1
		}
		return 0
	case "report":
		failed, err := report(stdin, stdout, os.Getenv("DOCKET_TEST_MONGO_URI"))
		if err != nil {
			fmt.Fprintf(stderr, "test-mongo: reading go test's output: %v\n", err)
			return 1
		}
		if failed {
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "realmongo: unknown command %q (check or report)\n", args[0])
	return 2
}
