package metrics_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/docketq/docket/docketprom/internal/metrics"
	"github.com/docketq/docket/internal/leadership"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/worker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// notLeading is an election this process never wins.
type notLeading struct{}

func (notLeading) Leading() (leadership.Term, bool) { return leadership.Term{}, false }

// descPattern reads a Desc's name and variable labels from its String.
var descPattern = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*variableLabels: \{([^}]*)\}\}$`)

// served returns the labels of every series a process's collector (what
// bin/worker and docketprom serve) can export, by name.
func served(t *testing.T) map[string][]string {
	t.Helper()
	q, err := queue.New(testdb.NewDB(t), queue.Config{})
	require.NoError(t, err)
	p, err := metrics.NewProcess(metrics.ProcessConfig{
		Stats:         func() worker.Stats { return worker.Stats{} },
		EventsDropped: func() uint64 { return 0 },
		Queue:         metrics.QueueStatsConfig{Queue: q, Leader: notLeading{}},
	})
	require.NoError(t, err)
	ch := make(chan *prometheus.Desc)
	go func() { p.Describe(ch); close(ch) }()
	out := map[string][]string{}
	for d := range ch {
		m := descPattern.FindStringSubmatch(d.String())
		require.NotNil(t, m, "a Desc this test cannot read: %s", d)
		labels := []string{}
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		out[m[1]] = labels
	}
	return out
}

// documentedRow matches a row of METRICS.md's tables: | `name` | type |
// labels | what |.
var documentedRow = regexp.MustCompile("(?m)^\\| `(docket_[a-z_]+)` \\| [a-z]+ \\|([^|]*)\\|")

// documented returns the labels of every series METRICS.md's tables
// list, by name.
func documented(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("../../../docs/METRICS.md")
	require.NoError(t, err)
	out := map[string][]string{}
	for _, m := range documentedRow.FindAllStringSubmatch(string(b), -1) {
		labels := []string{}
		for _, l := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(m[2], -1) {
			labels = append(labels, l[1])
		}
		slices.Sort(labels)
		out[m[1]] = labels
	}
	return out
}

// Every series /metrics can serve has a row in docs/METRICS.md with its
// labels, and every row there is a series served.
func TestMetricsMDListsEverySeriesServed(t *testing.T) {
	t.Parallel()
	docs := documented(t)
	for name, labels := range served(t) {
		doc, ok := docs[name]
		if !ok {
			t.Errorf("%s is served but has no row in docs/METRICS.md", name)
			continue
		}
		slices.Sort(labels)
		require.Equal(t, labels, doc, "the labels of %s in docs/METRICS.md", name)
		delete(docs, name)
	}
	for name := range docs {
		t.Errorf("docs/METRICS.md lists %s, which is not served", name)
	}
}
