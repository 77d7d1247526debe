package bench

import (
	"testing"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
)

// A burn-down is timed from the first claim stamp to the last finish,
// whatever order the jobs come in and whichever stamps a job lacks; with
// no span in the stamps, the time the bench polled stands.
func TestBurnSpan(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(ms int) *time.Time { t := t0.Add(time.Duration(ms) * time.Millisecond); return &t }
	job := func(claimed, finished *time.Time) jobs.Job {
		return jobs.Job{CreatedAt: t0, HeartbeatAt: claimed, FinishedAt: finished}
	}
	polled := 400 * time.Millisecond
	cases := []struct {
		name string
		js   []jobs.Job
		want time.Duration
	}{
		{"first claim to last finish", []jobs.Job{job(at(30), at(250)), job(at(10), at(40)), job(at(200), at(215))}, 240 * time.Millisecond},
		{"a job without a claim stamp", []jobs.Job{job(nil, at(300)), job(at(20), at(60))}, 280 * time.Millisecond},
		{"a job without a finish", []jobs.Job{job(at(5), nil), job(at(20), at(60))}, 55 * time.Millisecond},
		{"no jobs", nil, polled},
		{"no claim stamps", []jobs.Job{job(nil, at(60))}, polled},
		{"finished before claimed", []jobs.Job{job(at(60), at(50))}, polled},
	}
	for _, c := range cases {
		_, _, span := stampTimes(c.js)
		require.Equal(t, c.want, span.duration(polled), c.name)
	}
}
