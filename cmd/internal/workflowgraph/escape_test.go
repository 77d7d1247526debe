package workflowgraph_test

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/docketq/docket/cmd/internal/workflowgraph"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

// hostileNames are names another application could give its tasks.
var hostileNames = []string{
	`<script>window.pwned = 1</script>`,
	`a "quoted" name' & <b>bold</b>`,
	"line one\nline two\r\x1b[2Kthree",
	"not utf-8 \xff\xfe end",
	`back\slash \N \l \" "]; n0 -> n1; x [label="`,
	"\u202eright to left\u2028sep",
	`]]></text><script>x</script><![CDATA[`,
	strings.Repeat("long", 5000),
	"",
}

// hostileTasks are a chain of tasks named hostileNames, each with that
// name as its state too and an id holding quotes, markup and a new line;
// the last has no name and a kind of markup.
func hostileTasks() []queue.WorkflowTask {
	var tasks []queue.WorkflowTask
	for i, name := range hostileNames {
		t := task(fmt.Sprintf("id %d\" <&'>\n", i), jobs.State(name))
		t.Name = name
		if i > 0 {
			t.After = []queue.JobID{tasks[i-1].JobID}
		}
		if name == "" {
			t.Kind = "<i>kind</i>"
		}
		tasks = append(tasks, t)
	}
	return tasks
}

func TestLabel(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain":                   "plain",
		"a\nb\rc\td\x00\x1b\x7f":  "a␊b␍c␉d␀␛␡",
		"bad \xff\xfe u8":         "bad \uFFFD\uFFFD u8",
		"\u202eevil\u2066\u2028x": "\uFFFDevil\uFFFD\uFFFDx",
		"\u0085c1":                "\uFFFDc1",
		"exactly ten":             "exactly te…",
		"ten chars!":              "ten chars!",
		"日本語のタスク名です長い名前": "日本語のタスク名です…",
	} {
		require.Equal(t, want, workflowgraph.Label(in, 10), "%q", in)
	}
}

// dotLine is a statement workflowgraph.DOT writes, every string quoted.
var dotLine = regexp.MustCompile(`^(digraph ("(?:[^"\\\n]|\\.)*") \{|  label=("(?:[^"\\\n]|\\.)*");|  labelloc=t;|  node \[.*\];|  edge \[.*\];|  n\d+ \[((?:[a-z]+=("(?:[^"\\\n]|\\.)*")(?:, )?)+)\];|  \{ rank=same;( n\d+;)+ \}|  n\d+ -> n\d+( \[style=dashed, constraint=false\])?;|\})$`)

// dotString is a quoted DOT string.
var dotString = regexp.MustCompile(`"(?:[^"\\\n]|\\.)*"`)

// unquoteDOT is what Graphviz shows of a quoted label: \\ a backslash,
// \" a quote, \n a new line.
func unquoteDOT(s string) string {
	s = s[1 : len(s)-1]
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			if s[i] == 'n' {
				b.WriteByte('\n')
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Hostile names cannot break out of DOT's quoted strings: every line is
// a statement of the expected shape, every string is well quoted, and
// its label reads back as the name (as Label shows it), its id and
// state.
func TestDOTEscapesHostileNames(t *testing.T) {
	t.Parallel()
	tasks := hostileTasks()
	var out bytes.Buffer
	require.NoError(t, workflowgraph.DOT(&out, workflowgraph.Layout(tasks), "wf \"1\"\n<x>"))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	for _, l := range lines {
		require.Regexp(t, dotLine, l)
	}
	require.Equal(t, `digraph "wf \"1\"␊<x>" {`, lines[0])
	var labels []string
	for _, l := range lines {
		if m := regexp.MustCompile(`^  n\d+ \[label=("(?:[^"\\\n]|\\.)*")`).FindStringSubmatch(l); m != nil {
			labels = append(labels, unquoteDOT(m[1]))
		}
	}
	require.Len(t, labels, len(tasks))
	for i, tk := range tasks {
		name, state := tk.Name, string(tk.State)
		if name == "" {
			name = tk.Kind
		}
		if state == "" {
			state = "other"
		}
		want := workflowgraph.Label(name, 40) + "\n" + workflowgraph.Label(tk.ID, 40) + "\n" + workflowgraph.Label(state, 16)
		require.Equal(t, want, labels[i], "task %d", i)
	}
	require.Len(t, regexp.MustCompile(`(?m)^  n\d+ -> n\d+;$`).FindAllString(out.String(), -1), len(tasks)-1, "the chain's edges, and no others")
	for _, s := range dotString.FindAllString(out.String(), -1) {
		require.True(t, strings.ToValidUTF8(s, "") == s, "valid UTF-8: %q", s)
	}
}

// svgElements are the elements a drawing may hold.
var svgElements = map[string]bool{"svg": true, "defs": true, "marker": true, "path": true, "g": true, "rect": true, "text": true, "title": true, "a": true}

// Hostile names in SVG: the drawing is well-formed XML (read strictly)
// holding only the drawing's own elements and attributes, no event
// handler and no link but to the tasks' pages; each label reads back as
// the name, as Label shows it, cut short.
func TestSVGEscapesHostileNames(t *testing.T) {
	t.Parallel()
	tasks := hostileTasks()
	out := workflowgraph.SVG(workflowgraph.Layout(tasks), func(id queue.JobID) string { return "/jobs/" + url.PathEscape(id.Token()) })
	d := xml.NewDecoder(strings.NewReader(out))
	var names, hrefs []string
	inName := false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		switch tok := tok.(type) {
		case xml.StartElement:
			require.True(t, svgElements[tok.Name.Local], "element %s", tok.Name.Local)
			inName = false
			for _, a := range tok.Attr {
				require.False(t, strings.HasPrefix(strings.ToLower(a.Name.Local), "on"), "attribute %s", a.Name.Local)
				if tok.Name.Local == "a" && a.Name.Local == "href" {
					hrefs = append(hrefs, a.Value)
				}
				if tok.Name.Local == "text" && a.Name.Local == "class" && a.Value == "name" {
					inName = true
				}
			}
		case xml.CharData:
			if inName {
				names = append(names, string(tok))
				inName = false
			}
		case xml.ProcInst, xml.Directive:
			t.Fatalf("unexpected %T in the drawing", tok)
		}
	}
	require.Len(t, hrefs, len(tasks))
	for i, tk := range tasks {
		require.Equal(t, "/jobs/"+url.PathEscape(tk.JobID.Token()), hrefs[i])
		name := tk.Name
		if name == "" {
			name = tk.Kind
		}
		require.Equal(t, workflowgraph.Label(name, 16), names[i+len(names)-len(tasks)], "task %d", i)
	}
	require.Less(t, len(out), 20_000, "a very long name is cut")
}
