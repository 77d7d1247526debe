package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/docketq/docket/configs"
)

// event is one line of go test -json (go doc cmd/test2json), with the
// build events go test -json also writes (Action build-output and
// build-fail, keyed by ImportPath).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// skipped is a test that skipped, with what it said.
type skipped struct {
	pkg, test, why string
}

// report reads go test -json from in and writes to out what go test would
// print without -v (each package's result line, build errors, the output
// of the tests that fail), then the tests that skipped, each with its
// message. failed is whether a test, a package or a build failed. The
// credentials of uri, the server's, are hidden wherever a line shows them:
// a failing test's output may quote the URI it was given.
func report(in io.Reader, out io.Writer, uri string) (failed bool, err error) {
	if uri != "" {
		out = hidingWriter{w: out, uri: uri}
	}
	buffered := map[string][]string{} // a running test's output, by package and test
	var skips []skipped
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Action == "" {
			fmt.Fprintln(out, sc.Text()) // not an event: pass it on
			continue
		}
		key := e.Package + " " + e.Test
		switch {
		case e.Action == "build-output":
			fmt.Fprint(out, e.Output)
		case e.Action == "build-fail":
			failed = true
		case e.Test == "":
			// The package's own lines: "ok", "FAIL", "? … [no test files]".
			if e.Action == "fail" {
				failed = true
			}
			if e.Action == "output" && e.Output != "PASS\n" {
				fmt.Fprint(out, e.Output)
			}
		case e.Action == "output":
			buffered[key] = append(buffered[key], e.Output)
		case e.Action == "fail":
			failed = true
			for _, l := range buffered[key] {
				if !strings.HasPrefix(l, "=== ") {
					fmt.Fprint(out, l)
				}
			}
			delete(buffered, key)
		case e.Action == "skip":
			skips = append(skips, skipped{pkg: e.Package, test: e.Test, why: skipMessage(buffered[key])})
			delete(buffered, key)
		case e.Action == "pass":
			delete(buffered, key)
		}
	}
	if err := sc.Err(); err != nil {
		return true, err
	}
	writeSkips(out, skips)
	return failed, nil
}

// skipMessage is what a skipped test said: its output without go test's
// own lines.
func skipMessage(lines []string) string {
	var said []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		said = append(said, l)
	}
	if len(said) == 0 {
		return "(said nothing)"
	}
	return strings.Join(said, " | ")
}

func writeSkips(out io.Writer, skips []skipped) {
	if len(skips) == 0 {
		fmt.Fprintln(out, "test-mongo: no test skipped")
		return
	}
	noun := "tests"
	if len(skips) == 1 {
		noun = "test"
	}
	fmt.Fprintf(out, "test-mongo: %d %s skipped on this server:\n", len(skips), noun)
	for _, s := range skips {
		fmt.Fprintf(out, "  %s %s: %s\n", strings.TrimPrefix(s.pkg, "github.com/docketq/docket/"), s.test, s.why)
	}
}

// hidingWriter writes to w what it is given with the credentials of uri
// hidden, each call a whole line or more.
type hidingWriter struct {
	w   io.Writer
	uri string
}

func (h hidingWriter) Write(p []byte) (int, error) {
	s := strings.ReplaceAll(string(p), h.uri, redact(h.uri))
	if _, err := io.WriteString(h.w, configs.Redact(s, h.uri)); err != nil {
		return 0, err
	}
	return len(p), nil
}
