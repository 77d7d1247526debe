package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoPath matches a path into the repository in a page's inline code
// (`internal/store/server.go`, `cmd/internal/e2e`), which may end in a
// test of that package after a dot (`cmd/internal/e2e.TestChaos`).
var repoPath = regexp.MustCompile(`(?:^|[\s(` + "`" + `])((?:cmd|internal|queue|worker|recovery|handlers|jobs|configs|docketotel|docketprom|dockettest|devdb|scripts|docs)/[A-Za-z0-9_./-]*[A-Za-z0-9_])`)

// testSuffix is a test, example or benchmark named after a package's path.
var testSuffix = regexp.MustCompile(`\.((?:Test|Example|Benchmark)[A-Za-z0-9_]*)$`)

// notPaths are the matches of repoPath that are prose, not paths.
var notPaths = map[string]bool{
	"jobs/s": true, // a rate: "5000 jobs/s"
}

// inline matches an inline code span, outside fenced blocks.
var inline = regexp.MustCompile("`[^`\n]+`")

// TestDocsPathsExist checks that every file or folder of the repository
// that the README and docs/*.md name in inline code exists (a folder of
// the devdb module may be named from devdb/), and that a test named after
// a package's path is declared in that package: a file moved or renamed
// fails here. A path read from git history (`git show REV:PATH`) is not
// checked.
func TestDocsPathsExist(t *testing.T) {
	for _, page := range pages(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, span := range inline.FindAllString(fence.ReplaceAllString(string(text), ""), -1) {
			if strings.Contains(span, "git show") {
				continue
			}
			for _, m := range repoPath.FindAllStringSubmatch(span, -1) {
				path, test := m[1], ""
				if tm := testSuffix.FindStringSubmatch(path); tm != nil {
					path, test = strings.TrimSuffix(path, tm[0]), tm[1]
				}
				if !notPaths[path] {
					checkRepoPath(t, page, path, test)
				}
			}
		}
	}
}

// checkRepoPath fails the test unless path exists in the repository (or
// in the devdb module) and, when test is set, path's package declares it.
func checkRepoPath(t *testing.T, page, path, test string) {
	t.Helper()
	dir := filepath.Join("..", path)
	if _, err := os.Stat(dir); err != nil {
		dir = filepath.Join("..", "devdb", path)
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s names %s, which is not in the repository", page, path)
			return
		}
	}
	if test != "" && !exported(t, dir)[test] {
		t.Errorf("%s names %s.%s, which package %s does not declare", page, path, test, path)
	}
}

// mapWord is a word or a path of the layers map.
var mapWord = regexp.MustCompile(`[a-z0-9_.-]+(?:/[a-z0-9_.-]+)*/?`)

// TestDevelopingMapNamesEveryPackage checks the layers map at the top of
// DEVELOPING.md both ways: each folder it names exists (an indented
// internal/X under cmd/ is cmd/internal/X), and each package folder of
// docket's module is named in it, by its path or, for a command's or an
// internal package's, by its own name, or under a named parent.
func TestDevelopingMapNamesEveryPackage(t *testing.T) {
	text, err := os.ReadFile("DEVELOPING.md")
	if err != nil {
		t.Fatal(err)
	}
	block := fence.FindString(string(text))
	named := map[string]bool{}
	for _, line := range strings.Split(block, "\n") {
		for _, f := range mapWord.FindAllString(line, -1) {
			p := strings.TrimSuffix(f, "/")
			if strings.HasPrefix(line, "  ") && strings.HasPrefix(p, "internal/") {
				p = "cmd/" + p
			}
			if strings.Contains(f, "/") {
				if _, err := os.Stat(filepath.Join("..", p)); err != nil {
					t.Errorf("DEVELOPING.md's layers map names %s, which is not in the repository", f)
				}
			}
			named[p] = true
		}
	}
	for _, dir := range packageDirs(t) {
		if !mapNames(named, dir) {
			t.Errorf("DEVELOPING.md's layers map does not name the package folder %s", dir)
		}
	}
}

// mapNames reports whether the map's words name dir: its path, its last
// element (a command, an internal package), or a named parent's path or
// name, short of an internal folder (docketprom names not
// docketprom/internal/metrics) and of cmd.
func mapNames(named map[string]bool, dir string) bool {
	if named[dir] || named[filepath.Base(dir)] {
		return true
	}
	for p := filepath.Dir(dir); p != "." && filepath.Base(p) != "internal"; p = filepath.Dir(p) {
		if p != "cmd" && (named[p] || named[filepath.Base(p)]) {
			return true
		}
	}
	return false
}

// packageDirs are the folders of docket's module (not devdb's, not
// testdata) that hold Go files, relative to the repository's root.
func packageDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != ".." && (name == "devdb" || name == "testdata" || name == "bin" || strings.HasPrefix(name, ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() || path == ".." {
			return nil
		}
		if gos, _ := filepath.Glob(filepath.Join(path, "*.go")); len(gos) > 0 && path != filepath.Join("..", "docs") {
			dirs = append(dirs, filepath.ToSlash(strings.TrimPrefix(path, "../")))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}
