// Package testdb gives tests a real MongoDB-protocol server and a fresh
// database per test.
//
// A package whose tests use it calls Main from TestMain:
//
//	func TestMain(m *testing.M) { testdb.Main(m) }
//
// and each test takes a database of its own, dropped when it ends, so tests can
// run with t.Parallel():
//
//	db := testdb.NewDB(t)
//
// The server is the one named by DOCKET_TEST_MONGO_URI when that is set (a real
// MongoDB, say). Otherwise it is a devdb (devdb/cmd/devdb, in the devdb
// module) that testdb builds once per test binary, without -race so that the
// race detector watches docket and not FerretDB, and runs as a subprocess on a free port with a temporary data
// directory. It starts when a test first asks for it and stops when the tests
// end. Set DOCKET_DEVDB_BIN to a prebuilt devdb binary to skip the build.
//
// Set DOCKET_DEVDB_FLAGS to extra devdb flags, separated by spaces, to run
// every devdb that testdb starts (the shared one and StartDevDB's) with
// them (none when it is empty or unset); e.g. MongoDB's failure replies:
//
//	DOCKET_DEVDB_FLAGS='--faults stepdown=0.02,lostreply=0.01 --seed 7' go test ./queue
//
// devdb logs every fault it injects at warn level, which testdb passes on to
// stderr, with the seed, so a failing run can be replayed with the same
// --seed (docs/EMBEDDED-SERVER.md).
//
// Tests that need to stop, kill or restart the server themselves start a
// devdb of their own with StartDevDB.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/docketq/docket/internal/testdb/devdbproc"
)

// Environment variables that steer testdb.
const (
	// EnvMongoURI names a server to test against instead of a devdb.
	EnvMongoURI = "DOCKET_TEST_MONGO_URI"

	// EnvDevDBBin names a prebuilt devdb binary, skipping the build.
	EnvDevDBBin = "DOCKET_DEVDB_BIN"

	// EnvDevDBFlags holds extra flags, separated by spaces, for every devdb
	// testdb starts.
	EnvDevDBFlags = "DOCKET_DEVDB_FLAGS"
)

// MaxDBNameLen is the longest database name NewDB returns, in bytes: the
// limit MongoDB Atlas puts on database names.
const MaxDBNameLen = 38

// startTimeout bounds how long testdb waits for a devdb it started to answer
// a ping.
const startTimeout = 2 * time.Minute

var (
	mainCalled atomic.Bool

	// The shared server, started on first use.
	sharedOnce sync.Once
	sharedURI  string
	sharedErr  error
	sharedProc *devdbproc.Process // nil when EnvMongoURI is set
	sharedDir  string

	// The shared client, created on first use.
	clientOnce sync.Once
	client     *mongo.Client
	clientErr  error
)

// Main runs the tests of a package that uses testdb and exits with their
// status. Call it from TestMain. When the tests are done it disconnects the
// shared client, stops the shared devdb and removes its data directory and
// the binaries built for the tests.
func Main(m *testing.M) {
	mainCalled.Store(true)

	code := m.Run()

	if err := teardown(); err != nil {
		fmt.Fprintf(os.Stderr, "testdb: %v\n", err)
		if code == 0 {
			code = 1
		}
	}

	os.Exit(code)
}

func teardown() error {
	var errs []error

	if client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := client.Disconnect(ctx); err != nil {
			errs = append(errs, fmt.Errorf("disconnect the shared client: %w", err))
		}
		cancel()
	}

	if sharedProc != nil {
		if err := sharedProc.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop the shared devdb: %w", err))
		}
	}
	if sharedDir != "" {
		if err := os.RemoveAll(sharedDir); err != nil {
			errs = append(errs, fmt.Errorf("remove the shared devdb's data: %w", err))
		}
	}

	if err := removeBuilds(); err != nil {
		errs = append(errs, err)
	}

	return errors.Join(errs...)
}

// URI returns the connection string of the shared test server, starting it
// if needed; tests that start worker subprocesses pass it on to them. It
// panics if the server cannot be started or Main is not in use.
func URI() string {
	uri, err := shared()
	if err != nil {
		panic(err)
	}

	return uri
}

// shared starts the shared server on first use and returns its URI.
func shared() (string, error) {
	if !mainCalled.Load() {
		return "", errors.New("testdb: call testdb.Main(m) from TestMain in this package")
	}

	sharedOnce.Do(func() {
		if uri := os.Getenv(EnvMongoURI); uri != "" {
			sharedURI = uri
			return
		}

		bin, err := devDBBinary()
		if err != nil {
			sharedErr = err
			return
		}

		dir, err := os.MkdirTemp("", "docket-testdb-")
		if err != nil {
			sharedErr = fmt.Errorf("testdb: data directory: %w", err)
			return
		}
		sharedDir = dir

		p, err := devdbproc.Start(bin, "127.0.0.1:0", dir, startTimeout, DevDBFlags()...)
		if err != nil {
			sharedErr = err
			return
		}
		sharedProc = p
		sharedURI = p.URI()
	})

	return sharedURI, sharedErr
}

// DevDBFlags returns the extra devdb flags that EnvDevDBFlags holds, split at
// spaces; empty when it is unset.
func DevDBFlags() []string {
	return strings.Fields(os.Getenv(EnvDevDBFlags))
}

// Client returns a client of the shared test server, shared by all the tests
// of the test binary. Do not disconnect it.
func Client(t testing.TB) *mongo.Client {
	t.Helper()

	uri, err := shared()
	if err != nil {
		t.Fatal(err)
	}

	clientOnce.Do(func() {
		client, clientErr = mongo.Connect(options.Client().ApplyURI(uri).SetAppName("docket-tests"))
		if clientErr != nil {
			clientErr = fmt.Errorf("testdb: connect to %s: %w", uri, clientErr)
		}
	})
	if clientErr != nil {
		t.Fatal(clientErr)
	}

	return client
}

// Monitored returns a client of the shared test server of its own, whose
// commands are recorded, each as "name collection" (or the name alone when
// it names no collection), and a function that returns those recorded so
// far. The client is disconnected when the test ends.
func Monitored(t testing.TB) (*mongo.Client, func() []string) {
	t.Helper()

	uri, err := shared()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var cmds []string
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		c := e.CommandName
		if coll, ok := e.Command.Lookup(e.CommandName).StringValueOK(); ok {
			c += " " + coll
		}
		mu.Lock()
		cmds = append(cmds, c)
		mu.Unlock()
	}}
	c, err := mongo.Connect(options.Client().ApplyURI(uri).SetMonitor(mon))
	if err != nil {
		t.Fatalf("testdb: connect to %s: %v", uri, err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), cmds...)
	}
}

// NewDB returns a database of the shared test server for this test alone,
// named after the test, and drops it when the test ends.
func NewDB(t testing.TB) *mongo.Database {
	t.Helper()

	c := Client(t)
	name := dbName(t.Name())
	db := c.Database(name)

	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()

		if err := db.Drop(ctx); err != nil {
			t.Errorf("testdb: drop database %s: %v", name, err)
		}
	})

	return db
}

// dbName turns a test name into a database name: the characters
// [a-zA-Z0-9_] of testName, others replaced by '_', cut to fit
// MaxDBNameLen with '_' and a random suffix added.
func dbName(testName string) string {
	var suffix [3]byte
	_, _ = rand.Read(suffix[:]) // never fails
	tail := "_" + hex.EncodeToString(suffix[:])

	var b strings.Builder
	for _, r := range testName {
		if b.Len() == MaxDBNameLen-len(tail) {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		b.WriteString("test")
	}

	return b.String() + tail
}
