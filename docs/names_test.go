package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// code matches a fenced code block or an inline code span: the places a
// page names Go identifiers.
var code = regexp.MustCompile("(?ms)^```.*?^```|`[^`\n]+`")

// qualified matches a name qualified by one of docket's public packages,
// such as docket.JobGet or queue.ErrNotFound, or a method of one of its
// types (queue.SweepWorkflows).
// A trailing "*" names every name with that prefix (queue.TestStoredStats*).
var qualified = regexp.MustCompile(`\b(docket|queue|jobs|handlers|worker|recovery|configs|docketotel|docketprom|dockettest|store|cli|dashboard|e2e|metrics|leadership|testdb|chaos|realmongo|workflowgraph|devdb)\.([A-Z][A-Za-z0-9_]*)(\*?)`)

// pkgDirs are the directories of the packages whose path is not their name.
var pkgDirs = map[string]string{
	"docket": "..", "store": "../internal/store", "cli": "../cmd/internal/cli", "dashboard": "../cmd/internal/dashboard",
	"e2e": "../cmd/internal/e2e", "metrics": "../docketprom/internal/metrics", "leadership": "../internal/leadership",
	"testdb": "../internal/testdb", "chaos": "../cmd/internal/chaos", "realmongo": "../cmd/internal/realmongo",
	"workflowgraph": "../cmd/internal/workflowgraph",
}

// testName matches the names of tests, examples and benchmarks, which the
// docs cite as evidence: of a _test.go file's names, only they count (the
// helpers export_test.go exports are no user's).
var testName = regexp.MustCompile(`^(Test|Example|Benchmark|Fuzz)`)

// exported returns the exported top-level names declared in the Go files
// of dir: those of its API, and its tests, examples and benchmarks.
func exported(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			for _, n := range declNames(d) {
				if ast.IsExported(n) && (!strings.HasSuffix(f, "_test.go") || testName.MatchString(n)) {
					names[n] = true
				}
			}
		}
	}
	return names
}

// declNames are the top-level names d declares, methods included.
func declNames(d ast.Decl) []string {
	var out []string
	switch d := d.(type) {
	case *ast.FuncDecl:
		out = append(out, d.Name.Name)
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				out = append(out, s.Name.Name)
			case *ast.ValueSpec:
				for _, n := range s.Names {
					out = append(out, n.Name)
				}
			}
		}
	}
	return out
}

// TestDocsNameExportedIdentifiers checks that every package-qualified name
// in the code of the README and docs/*.md (docket.JobGet, queue.ErrNotFound)
// is exported by that package: a name removed or made private fails here.
func TestDocsNameExportedIdentifiers(t *testing.T) {
	known := map[string]map[string]bool{}
	for _, page := range pages(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, span := range code.FindAllString(string(text), -1) {
			for _, m := range qualified.FindAllStringSubmatch(span, -1) {
				pkg, name, prefix := m[1], m[2], m[3] == "*"
				if known[pkg] == nil {
					dir, ok := pkgDirs[pkg]
					if !ok {
						dir = filepath.Join("..", pkg)
					}
					known[pkg] = exported(t, dir)
				}
				if !known[pkg][name] && !(prefix && hasPrefixed(known[pkg], name)) {
					t.Errorf("%s names %s.%s, which package %s does not export", page, pkg, name, pkg)
				}
			}
		}
	}
}

// hasPrefixed reports whether one of names starts with prefix.
func hasPrefixed(names map[string]bool, prefix string) bool {
	for n := range names {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}
