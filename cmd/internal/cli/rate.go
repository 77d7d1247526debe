package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/docketq/docket/queue"
)

// ctlRate sets or clears a rate limit: rest is what follows `limit rate`:
// NAME RATE [--burst B] [--per FIELD], or NAME off. The flags may come
// after the arguments; RATE may be given in words, as ParseRate reads it
// ("10/m burst 2 per customerId", quoted or not).
func ctlRate(e *env, rest []string, by string) error {
	name, val, r, err := rateArgs(rest)
	if err != nil {
		return err
	}
	if val == "off" {
		if r.Burst > 0 || r.By != "" {
			return badInput("--burst and --per have no meaning with off: limit rate %s off", shown(name))
		}
		had, err := e.q.ClearRate(e.ctx, name)
		return e.reportChange(name, had, err, fmt.Sprintf("no rate limit: workers apply it within %s", queue.LimitRefresh), "had no rate limit")
	}
	if err := e.q.SetRate(e.ctx, name, r, by); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s\trate %s: workers apply it within %s\n", shown(name), shown(r.String()), queue.LimitRefresh)
	return nil
}

// rateArgs reads `limit rate`'s arguments: the limit's name, its value
// (a rate, or off) and the rate it gives, with --burst and --per applied
// (for off, only them).
func rateArgs(rest []string) (name, val string, r queue.Rate, err error) {
	var burst, per string
	if rest, err = trailingFlag(rest, "per", &per); err != nil {
		return "", "", r, err
	}
	if rest, err = trailingFlag(rest, "burst", &burst); err != nil {
		return "", "", r, err
	}
	if len(rest) < 2 {
		return "", "", r, badInput("give a limit's name and a rate, or off: limit rate kind:KIND 14/s [--burst 5] [--per FIELD], limit rate queue:QUEUE 600/m, limit rate NAME off")
	}
	name, val = rest[0], strings.Join(rest[1:], " ")
	if _, _, err := queue.ParseLimitName(name); err != nil {
		return "", "", r, badInput("%s", shown(err.Error()))
	}
	if val != "off" {
		if r, err = queue.ParseRate(val); err != nil {
			return "", "", r, badInput("%s", shown(err.Error()))
		}
	}
	if per != "" {
		if err := queue.ValidPartitionArg(per); err != nil {
			return "", "", r, badInput("--per: %s", shown(err.Error()))
		}
		r.By = per
	}
	if burst != "" {
		n, err := strconv.Atoi(burst)
		if err != nil || n < 1 || n > queue.MaxBurst {
			return "", "", r, badInput("--burst %q: give a whole number from 1 to %d", burst, queue.MaxBurst)
		}
		r.Burst = n
	}
	return name, val, r, nil
}

// rateNote says how a rate reads in a table: rate, burst used, next
// start, set.
func rateNote(r queue.RateLimit, now time.Time) string {
	if r.Malformed != "" {
		return "-\tmalformed, limits nothing: " + shown(r.Malformed) + "; `docketctl limit rate` rewrites it"
	}
	next := "now"
	if !r.NextStart.IsZero() && r.NextStart.After(now) {
		next = "in " + r.NextStart.Sub(now).Round(time.Millisecond).String()
	}
	set := ""
	if !r.SetAt.IsZero() {
		set = r.SetAt.Format(time.RFC3339)
	}
	if r.SetBy != "" {
		set += " by " + shown(r.SetBy)
	}
	if r.Rate.By != "" {
		return fmt.Sprintf("%s\t%s, %d started\t%s", shown(r.Rate.String()), partitionsNote(r), r.Starts, set)
	}
	return fmt.Sprintf("%s\tburst %d / %d used, next start %s, %d started\t%s", r.Rate, r.Used, max(r.Rate.Burst, 1), next, r.Starts, set)
}

// partitionsNote says how a partitioned rate's partitions are used: "3
// partitions with state, 1 spent".
func partitionsNote(r queue.RateLimit) string {
	return fmt.Sprintf("%d partitions with state, %d spent", r.Partitions, r.Spent)
}

// printRates lists the rates in listLimits' table of rates.
func printRates(w io.Writer, rates []queue.RateLimit) {
	now := time.Now()
	for _, r := range rates {
		fmt.Fprintf(w, "%s\t%s\n", shown(r.Name), rateNote(r, now))
	}
}

// rateJSON is a rate limit in stats --json.
type rateJSON struct {
	Name      string    `json:"name"`
	Rate      string    `json:"rate"`
	Burst     int       `json:"burst"`
	BurstUsed int       `json:"burstUsed"`
	Starts    int64     `json:"starts"`
	NextStart *jsonTime `json:"nextStart,omitempty"`
	Waiting   int64     `json:"waiting"`
	Malformed string    `json:"malformed,omitempty"`
	// PartitionBy is a partitioned rate's args field; Partitions how many
	// of its partitions have state, Spent how many allow no start now.
	PartitionBy string `json:"partitionBy,omitempty"`
	Partitions  int    `json:"partitions,omitempty"`
	Spent       int    `json:"spent,omitempty"`
}

// limitStats are what stats shows of the limits beside the concurrency
// limits: the rates, and the jobs waiting on each limit.
type limitStats struct {
	rates   []queue.RateLimit
	waiting map[string]int64
}

// readLimitStats reads the rates and counts the runnable jobs of every
// limit and rate.
func readLimitStats(e *env, limits []queue.RunLimit) (limitStats, error) {
	rates, err := e.q.RateLimits(e.ctx)
	if err != nil {
		return limitStats{}, err
	}
	var names []string
	for _, l := range limits {
		names = append(names, l.Name)
	}
	for _, r := range rates {
		names = append(names, r.Name)
	}
	waiting, err := e.q.WaitingOnLimits(e.ctx, names)
	if err != nil {
		return limitStats{}, err
	}
	return limitStats{rates: rates, waiting: waiting}, nil
}

// printText writes the rate lines of stats.
func (s limitStats) printText(w io.Writer) {
	now := time.Now()
	for _, r := range s.rates {
		if r.Malformed != "" {
			fmt.Fprintf(w, "rate %s: limits nothing (malformed: %s)\n", shown(r.Name), shown(r.Malformed))
			continue
		}
		if r.Rate.By != "" {
			fmt.Fprintf(w, "rate %s: %s, %s, %d waiting\n", shown(r.Name), shown(r.Rate.String()), partitionsNote(r), s.waiting[r.Name])
			continue
		}
		next := ""
		if !r.NextStart.IsZero() && r.NextStart.After(now) {
			next = ", next start in " + r.NextStart.Sub(now).Round(time.Millisecond).String()
		}
		fmt.Fprintf(w, "rate %s: %s, burst %d / %d used%s, %d waiting\n", shown(r.Name), r.Rate, r.Used, max(r.Rate.Burst, 1), next, s.waiting[r.Name])
	}
}

// json returns the rates for stats --json.
func (s limitStats) json() []rateJSON {
	var out []rateJSON
	for _, r := range s.rates {
		j := rateJSON{Name: r.Name, Rate: r.Rate.String(), Burst: max(r.Rate.Burst, 1), BurstUsed: r.Used, Starts: r.Starts, Waiting: s.waiting[r.Name], Malformed: r.Malformed,
			PartitionBy: r.Rate.By, Partitions: r.Partitions, Spent: r.Spent}
		if r.Malformed != "" {
			j.Rate, j.Burst = "", 0
		}
		if !r.NextStart.IsZero() {
			t := jsonTime(r.NextStart)
			j.NextStart = &t
		}
		out = append(out, j)
	}
	return out
}
