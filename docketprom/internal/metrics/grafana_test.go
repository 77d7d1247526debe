package metrics_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// grafanaDashboard is what this test reads of docs/grafana/docket.json:
// the fields Grafana needs to import it.
type grafanaDashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name, Type string
			Query      any            `json:"query"`
			Datasource *grafanaSource `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaSource struct{ Type, UID string }

type grafanaPanel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *grafanaSource `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *grafanaSource `json:"datasource"`
	} `json:"targets"`
}

// promQuery is what a PromQL expression reads: the series' names, the
// labels its matchers name and those it groups by.
type promQuery struct {
	metrics, matched, grouped []string
}

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers = regexp.MustCompile(`\{([^}]*)\}`)
	promMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promNumber   = regexp.MustCompile(`\b\d+(?:\.\d+)?\b`)
)

// promFunctions are the functions and aggregations the dashboard may
// call.
var promFunctions = map[string]bool{"sum": true, "max": true, "min": true, "count": true, "avg": true, "rate": true, "irate": true,
	"increase": true, "histogram_quantile": true, "label_values": true}

// parsePromQL reads expr (strings, ranges and groupings removed in turn,
// what is left are functions and series names).
func parsePromQL(t *testing.T, expr string) promQuery {
	t.Helper()
	var q promQuery
	s := promString.ReplaceAllString(expr, `""`)
	for _, m := range promMatchers.FindAllStringSubmatch(s, -1) {
		for _, l := range promMatcher.FindAllStringSubmatch(m[1], -1) {
			q.matched = append(q.matched, l[1])
		}
	}
	s = promMatchers.ReplaceAllString(s, " ")
	s = promRange.ReplaceAllString(s, " ")
	for _, m := range promGrouping.FindAllStringSubmatch(s, -1) {
		for _, l := range strings.Split(m[1], ",") {
			q.grouped = append(q.grouped, strings.TrimSpace(l))
		}
	}
	s = promGrouping.ReplaceAllString(s, " ")
	s = promNumber.ReplaceAllString(s, " ")
	for _, loc := range promIdent.FindAllStringIndex(s, -1) {
		id := s[loc[0]:loc[1]]
		if strings.HasPrefix(strings.TrimSpace(s[loc[1]:]), "(") {
			require.True(t, promFunctions[id], "%q calls %s, which this test does not know", expr, id)
			continue
		}
		q.metrics = append(q.metrics, id)
	}
	require.NotEmpty(t, q.metrics, "%q reads no series", expr)
	return q
}

// seriesLabels are the labels of the series name as /metrics serves it:
// a histogram's _bucket, _sum and _count series are served under its
// name, the buckets with le; false when it is not served.
func seriesLabels(served map[string][]string, name string) ([]string, bool) {
	if labels, ok := served[name]; ok {
		return labels, true
	}
	for suffix, extra := range map[string][]string{"_bucket": {"le"}, "_sum": nil, "_count": nil} {
		if labels, ok := served[strings.TrimSuffix(name, suffix)]; ok && strings.HasSuffix(name, suffix) {
			return append(slices.Clone(labels), extra...), true
		}
	}
	return nil, false
}

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"instance", "job", "pod"}

func readGrafanaDashboard(t *testing.T) (grafanaDashboard, string) {
	t.Helper()
	b, err := os.ReadFile("../../../docs/grafana/docket.json")
	require.NoError(t, err)
	var d grafanaDashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	require.NoError(t, dec.Decode(&d), "docs/grafana/docket.json is not JSON of a dashboard")
	return d, string(b)
}

// TestGrafanaDashboardQueriesServedSeries: every PromQL expression of
// docs/grafana/docket.json (panels and variables) reads only series that
// /metrics serves (the collector's own list, as docs_test reads it), its
// matchers name only labels those series have, and it groups by nothing
// else (but le for buckets and the labels Prometheus adds).
func TestGrafanaDashboardQueriesServedSeries(t *testing.T) {
	t.Parallel()
	served := served(t)
	d, _ := readGrafanaDashboard(t)
	var exprs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			q, _ := v.Query.(map[string]any)["query"].(string)
			m := regexp.MustCompile(`^label_values\((\w+), (\w+)\)$`).FindStringSubmatch(q)
			require.NotNil(t, m, "variable %s: %q", v.Name, q)
			labels, ok := seriesLabels(served, m[1])
			require.True(t, ok, "variable %s reads %s, which /metrics does not serve", v.Name, m[1])
			require.Contains(t, labels, m[2], "variable %s", v.Name)
		}
	}
	require.Greater(t, len(exprs), 20)
	seen := map[string]bool{}
	for _, expr := range exprs {
		q := parsePromQL(t, expr)
		all := slices.Clone(targetLabels)
		for _, name := range q.metrics {
			labels, ok := seriesLabels(served, name)
			require.True(t, ok, "%q reads %s, which /metrics does not serve", expr, name)
			seen[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")] = true
			for _, l := range q.matched {
				require.Contains(t, labels, l, "%q matches on %s, which %s does not have", expr, l, name)
			}
			all = append(all, labels...)
		}
		for _, l := range q.grouped {
			require.Contains(t, all, l, "%q groups by %s, which its series do not have", expr, l)
		}
	}
	for _, name := range []string{"docket_jobs_finished_total", "docket_jobs", "docket_oldest_available_job_age_seconds", "docket_job_duration_seconds",
		"docket_limit_running_jobs", "docket_rate_limit_per_second", "docket_leader"} {
		require.True(t, seen[name], "the dashboard shows %s", name)
	}
}

// The checker itself: a series /metrics does not serve, a label a series
// does not have, a grouping by one, are each caught.
func TestGrafanaCheckerCatchesMistakes(t *testing.T) {
	t.Parallel()
	served := map[string][]string{"docket_jobs": {"queue", "state"}, "docket_job_duration_seconds": {"kind"}}
	q := parsePromQL(t, `histogram_quantile(0.95, sum by (kind, le) (rate(docket_job_duration_seconds_bucket{kind=~"$kind"}[$__rate_interval])))`)
	require.Equal(t, promQuery{metrics: []string{"docket_job_duration_seconds_bucket"}, matched: []string{"kind"}, grouped: []string{"kind", "le"}}, q)
	labels, ok := seriesLabels(served, "docket_job_duration_seconds_bucket")
	require.True(t, ok)
	require.ElementsMatch(t, []string{"kind", "le"}, labels)
	_, ok = seriesLabels(served, "docket_jobs_total")
	require.False(t, ok)
	_, ok = seriesLabels(served, "docket_jobs_bucket")
	require.True(t, ok, "a _bucket of any served name is accepted by name; its labels then lack none")
	q = parsePromQL(t, `sum by (queue) (max without (instance, pod) (docket_jobz{state="available", queue=~"$queue"})) / docket_jobs`)
	require.Equal(t, []string{"docket_jobz", "docket_jobs"}, q.metrics)
	require.Equal(t, []string{"state", "queue"}, q.matched)
	require.Equal(t, []string{"queue", "instance", "pod"}, q.grouped)
}

// TestGrafanaDashboardImports: docs/grafana/docket.json has what Grafana
// 10 needs to import it: a title, a uid, a schema version of Grafana 10,
// a Prometheus datasource variable that every panel and query uses, the
// variables the queries name, panels with unique ids on the 24-column
// grid without overlapping, and queries with unique refIds.
func TestGrafanaDashboardImports(t *testing.T) {
	t.Parallel()
	d, raw := readGrafanaDashboard(t)
	require.NotEmpty(t, d.Title)
	require.NotEmpty(t, d.UID)
	require.GreaterOrEqual(t, d.SchemaVersion, 36, "Grafana 10's schema")
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Name == "datasource" {
			require.Equal(t, "prometheus", v.Query)
		}
	}
	require.Equal(t, "datasource", vars["datasource"])
	for _, ref := range regexp.MustCompile(`\$\{?([a-zA-Z_]+)`).FindAllStringSubmatch(raw, -1) {
		if !strings.HasPrefix(ref[1], "__") {
			require.Contains(t, vars, ref[1], "the dashboard names $%s", ref[1])
		}
	}
	ids := map[int]bool{}
	cells := map[[2]int]string{}
	for _, p := range d.Panels {
		require.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
		require.NotEmpty(t, p.Title)
		g := p.GridPos
		require.True(t, g.W > 0 && g.H > 0 && g.X >= 0 && g.X+g.W <= 24 && g.Y >= 0, "panel %q at %+v", p.Title, g)
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				require.Empty(t, cells[[2]int{x, y}], "panels %q and %q overlap", cells[[2]int{x, y}], p.Title)
				cells[[2]int{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		require.Equal(t, &grafanaSource{Type: "prometheus", UID: "${datasource}"}, p.Datasource, p.Title)
		require.NotEmpty(t, p.Targets, p.Title)
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			require.False(t, refs[tg.RefID], "%s: refId %s twice", p.Title, tg.RefID)
			refs[tg.RefID] = true
			require.NotEmpty(t, tg.Expr)
			require.Equal(t, p.Datasource, tg.Datasource)
		}
	}
}
