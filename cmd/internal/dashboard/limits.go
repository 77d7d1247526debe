package dashboard

import (
	"context"
	"fmt"
	"time"
)

// limitRow is one concurrency limit or rate limit as the overview shows
// it. Every text in it comes from the database (names another app may
// have written): the template escapes it.
type limitRow struct {
	Name string
	// What is "concurrency" or "rate".
	What string
	// Use is "3 / 5 slots taken" or "14/s burst 5: 2 / 5 of the burst used".
	Use string
	// Bound says the limit lets none start now: full, or rate spent.
	Bound bool
	// Next is when a rate's next start is allowed ("in 40ms"), or "".
	Next string
	// Waiting counts the jobs of the limit that could run now.
	Waiting   int64
	Malformed string
}

// limitRows reads the concurrency limits, the rates, and the jobs waiting
// on each.
func (s *Server) limitRows(ctx context.Context) ([]limitRow, error) {
	limits, err := s.q.RunLimits(ctx)
	if err != nil {
		return nil, err
	}
	rates, err := s.q.RateLimits(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, l := range limits {
		names = append(names, l.Name)
	}
	for _, r := range rates {
		names = append(names, r.Name)
	}
	waiting, err := s.q.WaitingOnLimits(ctx, names)
	if err != nil {
		return nil, err
	}
	var rows []limitRow
	for _, l := range limits {
		row := limitRow{Name: l.Name, What: "concurrency", Waiting: waiting[l.Name], Malformed: l.Malformed}
		if l.Malformed == "" {
			row.Use = l.Use()
			row.Bound = l.Binding()
		}
		rows = append(rows, row)
	}
	now := time.Now()
	for _, r := range rates {
		row := limitRow{Name: r.Name, What: "rate", Waiting: waiting[r.Name], Malformed: r.Malformed}
		switch {
		case r.Malformed != "":
		case r.Rate.By != "":
			// Per partition: no one burst or next start to show.
			row.Use = fmt.Sprintf("%s: %d of %d partitions spent, %d started", r.Rate, r.Spent, r.Partitions, r.Starts)
		default:
			burst := max(r.Rate.Burst, 1)
			row.Use = fmt.Sprintf("%s: %d / %d of the burst used, %d started", r.Rate, r.Used, burst, r.Starts)
			row.Bound = r.Used >= burst
			if r.NextStart.After(now) {
				row.Next = "in " + roundWait(r.NextStart.Sub(now)).String()
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// roundWait rounds a wait to what a reader needs: milliseconds under ten
// seconds, seconds above.
func roundWait(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}
