package cli

import (
	"regexp"
	"strings"
	"testing"

	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
)

// dotStatement is a line `workflow --dot` prints, every string quoted.
var dotStatement = regexp.MustCompile(`^(digraph "(?:[^"\\\n]|\\.)*" \{|  label="(?:[^"\\\n]|\\.)*";|  labelloc=t;|  node \[.*\];|  edge \[.*\];|  n\d+ \[(?:[a-z]+="(?:[^"\\\n]|\\.)*"(?:, )?)+\];|  \{ rank=same;( n\d+;)+ \}|  n\d+ -> n\d+( \[style=dashed, constraint=false\])?;|\})$`)

// TestCtlWorkflowDOT: `docketctl workflow --dot wf-1` prints the
// workflow as a Graphviz digraph: a node per task labelled with its name,
// id and state, an edge per parent on the page, each layer a rank; the
// foreign task's name, kind and state, full of escape sequences and a
// new line, stay inside their quoted label, as pictures; a page that
// leaves tasks out says which in the graph's name and the next --offset
// on stderr, a page past the end is an empty graph saying so; --dot with
// --json is refused.
func TestCtlWorkflowDOT(t *testing.T) {
	t.Parallel()
	db := testdb.NewDB(t)
	uri := testdb.URI()
	enqueueWorkflow(t, db)

	out, stderr, code := runCtl(t, uri, db, "workflow", "--dot", "wf-1")
	require.Equal(t, 0, code, stderr)
	require.Empty(t, stderr)
	requireSafe(t, out, false)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	for _, l := range lines {
		require.Regexp(t, dotStatement, l)
	}
	require.Equal(t, `digraph "workflow wf-1" {`, lines[0])
	require.Contains(t, out, `[label="t␍␛[2Kfake␊row\n{\"$numberInt\":\"7\"}\ndead␛[8m", tooltip="t␍␛[2Kfake␊row", fillcolor="#eef1f6", color="#475467"];`)
	require.Contains(t, out, `[label="extract-task\nextract\navailable", tooltip="extract-task", fillcolor="#fdf3e0", color="#b7791f"];`)
	require.Len(t, regexp.MustCompile(`(?m)^  n\d+ \[label=`).FindAllString(out, -1), 7)
	// extract→transform→load, extract→check→audit, extract→report,
	// load→report, extract→7.
	require.Len(t, regexp.MustCompile(`(?m)^  n\d+ -> n\d+;$`).FindAllString(out, -1), 7)

	out, stderr, code = runCtl(t, uri, db, "workflow", "--dot", "--limit", "3", "wf-1")
	require.Equal(t, 0, code, stderr)
	require.True(t, strings.HasPrefix(out, `digraph "workflow wf-1, tasks 1 to 3 of 7 (--offset, --limit)" {`), out)
	require.Equal(t, "more: --offset 3\n", stderr)

	out, stderr, code = runCtl(t, uri, db, "workflow", "--dot", "--offset", "9", "wf-1")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "digraph \"workflow wf-1, no tasks from --offset 9: there are 7\" {\n"+
		"  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=11];\n  edge [color=\"#98a2b3\"];\n}\n", out)

	_, stderr, code = runCtl(t, uri, db, "workflow", "--dot", "--json", "wf-1")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--json and --dot: give one")
}
