package dashboard_test

import (
	"fmt"
	"net"
	"testing"

	"github.com/docketq/docket/cmd/internal/dashboard"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
)

// TestRebindingPageIsRefusedInABrowser replays DNS rebinding in headless
// Chromium: evil.test resolves to 127.0.0.1 (--host-resolver-rules), so a
// page from http://evil.test:PORT/ is same-origin with the dashboard on
// 127.0.0.1:PORT. The dashboard refuses to show it; the page's script,
// running as evil.test, can neither read a job's confirm page (its form
// token) nor delete the job, even holding a valid token, though its
// Origin matches its Host. The same dashboard is served as localhost.
// (Issue 21 item 1: the page read every page and deleted jobs.)
func TestRebindingPageIsRefusedInABrowser(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{Refresh: -1})
	br := startBrowser(t, "--host-resolver-rules=MAP evil.test 127.0.0.1")
	port := b.srv.Listener.Addr().(*net.TCPAddr).Port
	victim := b.ids["done1"]
	token := b.token(t)

	br.open(fmt.Sprintf("http://evil.test:%d/", port))
	body := br.text("body")
	require.Contains(t, body, `docket dashboard: refused: this dashboard is not served as "evil.test:`)
	require.Equal(t, float64(0), br.script(`return document.querySelectorAll("#queues, .card").length`))
	br.screenshot("rebinding-refused")

	// The attacker's script, same-origin with the dashboard's address.
	got := br.script(`return (async () => {
		const page = await fetch("/jobs/" + arguments[0] + "/delete");
		const html = await page.text();
		const del = await fetch("/jobs/" + arguments[0] + "/delete", {method: "POST",
			headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: "csrf=" + arguments[1]});
		const job = await fetch("/jobs/" + arguments[0]);
		return [location.origin, page.status, html.includes("csrf"), del.status, job.status, (await job.text()).includes("mail")];
	})()`, victim, token).([]any)
	require.Equal(t, []any{fmt.Sprintf("http://evil.test:%d", port), float64(421), false, float64(421), float64(421), false}, got)
	require.Equal(t, jobs.StateSucceeded, b.state(t, "done1"), "the job was not deleted")

	br.open(fmt.Sprintf("http://localhost:%d/jobs/%s", port, victim))
	require.Equal(t, "succeeded", br.text("#state"), "served as localhost")
}
