// Package docs holds docket's user guide, in Markdown; this test keeps its
// links working.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// link matches a Markdown link or image target: [text](target) or
// ![alt](target). Targets with spaces are not used in these docs.
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// heading matches an ATX heading line.
var heading = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)

// fence matches a fenced code block, whose lines are neither links nor
// headings.
var fence = regexp.MustCompile("(?ms)^```.*?^```")

// slug is GitHub's anchor for a heading: lower case, punctuation other
// than '-' and '_' dropped, spaces made '-'.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of the headings of a Markdown text, with
// GitHub's -1, -2 … suffixes for repeated ones.
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// pages are the Markdown files of the guide: the README and docs/*.md.
func pages(t *testing.T) []string {
	t.Helper()
	md, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../README.md"}, md...)
}

// TestDocsLinksResolve checks every relative link of the README and of
// docs/*.md: the file it names exists and, when it names an anchor, the
// target has a heading of that anchor.
func TestDocsLinksResolve(t *testing.T) {
	cache := map[string]map[string]bool{}
	for _, page := range pages(t) {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		text := fence.ReplaceAllString(string(raw), "")
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %q: %v", page, target, err)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if cache[path] == nil {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				cache[path] = anchors(string(b))
			}
			if !cache[path][anchor] {
				t.Errorf("%s: link %q: %s has no heading #%s", page, target, path, anchor)
			}
		}
	}
}

// TestEveryDocsPageIsInTheReadmesMap checks that every page of docs/ is
// linked from the README, so that nothing moved out of it is unreachable.
func TestEveryDocsPageIsInTheReadmesMap(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	md, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range md {
		if !strings.Contains(string(readme), "(docs/"+page+")") {
			t.Errorf("README.md does not link docs/%s", page)
		}
	}
}
