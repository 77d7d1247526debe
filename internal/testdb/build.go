package testdb

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// DevDBPackage is the import path of the devdb command. It lives in the devdb
// module (the devdb directory), so that docket's own module graph holds no
// FerretDB package: BuildBinary builds it from there.
const DevDBPackage = "github.com/docketq/docket/devdb/cmd/devdb"

// devDBModule is the devdb module's directory under docket's module root.
const devDBModule = "devdb"

type buildKey struct {
	pkg  string
	race bool
}

type buildResult struct {
	once sync.Once
	path string
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[buildKey]*buildResult{}
	buildDir string // created on the first build, removed by Main
)

// BuildBinary builds the package pkg of this module, an import path such as
// "github.com/docketq/docket/cmd/worker", with or without the race detector,
// and returns the path of the binary. Each pkg and race pair is built once per
// test binary; Main removes the binaries when the tests end.
func BuildBinary(t testing.TB, pkg string, race bool) string {
	t.Helper()

	bin, err := buildBinary(pkg, race)
	if err != nil {
		t.Fatal(err)
	}

	return bin
}

// DevDBBinary returns the path of a devdb binary: the one named by
// DOCKET_DEVDB_BIN, or else one built from this module without -race.
func DevDBBinary(t testing.TB) string {
	t.Helper()

	bin, err := devDBBinary()
	if err != nil {
		t.Fatal(err)
	}

	return bin
}

func devDBBinary() (string, error) {
	if bin := os.Getenv(EnvDevDBBin); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("testdb: %s: %w", EnvDevDBBin, err)
		}
		return bin, nil
	}

	return buildBinary(DevDBPackage, false)
}

func buildBinary(pkg string, race bool) (string, error) {
	key := buildKey{pkg: pkg, race: race}

	buildsMu.Lock()
	b := builds[key]
	if b == nil {
		b = &buildResult{}
		builds[key] = b
	}
	buildsMu.Unlock()

	b.once.Do(func() { b.path, b.err = runBuild(pkg, race) })

	return b.path, b.err
}

func runBuild(pkg string, race bool) (string, error) {
	root, err := buildRoot()
	if err != nil {
		return "", err
	}

	// A directory per build, so that two packages with the same last
	// element do not collide and the binary keeps its usual name.
	sub := strings.NewReplacer("/", "_", ".", "_").Replace(pkg)
	if race {
		sub += "-race"
	}
	out := filepath.Join(root, sub, path.Base(pkg))

	note := ""
	if pkg == DevDBPackage {
		note = "; the first build of FerretDB takes about 2 minutes"
	}
	fmt.Fprintf(os.Stderr, "testdb: building %s (race=%t)%s...\n", pkg, race, note)
	start := time.Now()

	// Test binaries of several packages may start at once: build one at a
	// time, so that a cold build is done once and the others hit the cache.
	unlock, err := lockBuilds()
	if err != nil {
		return "", err
	}
	defer unlock()

	cmd := exec.Command("go", "build", "-race="+strconv.FormatBool(race), "-o", out, pkg)
	if pkg == DevDBPackage {
		dir, err := moduleDir(devDBModule)
		if err != nil {
			return "", err
		}
		cmd.Dir = dir
		// FerretDB with devdb's pushdown, as make build builds it.
		work, err := exec.Command(filepath.Join(dir, "_overlay", "workspace.sh")).Output()
		if err != nil {
			return "", fmt.Errorf("testdb: devdb/_overlay/workspace.sh: %w", err)
		}
		cmd.Env = append(os.Environ(), "GOWORK="+strings.TrimSpace(string(work)))
	}
	if output, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testdb: go build %s: %w\n%s", pkg, err, output)
	}

	fmt.Fprintf(os.Stderr, "testdb: built %s in %v\n", pkg, time.Since(start).Round(100*time.Millisecond))

	return out, nil
}

// buildRoot returns the directory the binaries go to, creating it first.
func buildRoot() (string, error) {
	buildsMu.Lock()
	defer buildsMu.Unlock()

	if buildDir == "" {
		dir, err := os.MkdirTemp("", "docket-testbin-")
		if err != nil {
			return "", fmt.Errorf("testdb: directory for test binaries: %w", err)
		}
		buildDir = dir
	}

	return buildDir, nil
}

// removeBuilds removes the binaries built so far.
func removeBuilds() error {
	buildsMu.Lock()
	defer buildsMu.Unlock()

	if buildDir == "" {
		return nil
	}
	if err := os.RemoveAll(buildDir); err != nil {
		return fmt.Errorf("remove test binaries: %w", err)
	}
	buildDir = ""

	return nil
}

// moduleDir returns the directory sub of docket's module root, found with
// go env GOMOD from the test's working directory (its package directory).
func moduleDir(sub string) (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("testdb: go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("testdb: not inside docket's module (go env GOMOD is %q)", gomod)
	}
	return filepath.Join(filepath.Dir(gomod), sub), nil
}
