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
	var args []string
	burst := -1
	per := ""
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		switch {
		case a == "--per" || a == "-per":
			if i+1 == len(rest) {
				return badInput("--per needs an args field")
			}
			i++
			per = rest[i]
			if err := queue.ValidPartitionArg(per); err != nil {
				return badInput("--per: %s", shown(err.Error()))
			}
		case strings.HasPrefix(a, "--per=") || strings.HasPrefix(a, "-per="):
			_, per, _ = strings.Cut(a, "=")
			if err := queue.ValidPartitionArg(per); err != nil {
				return badInput("--per: %s", shown(err.Error()))
			}
		case a == "--burst" || a == "-burst":
			if i+1 == len(rest) {
				return badInput("--burst needs a number")
			}
			i++
			a = "--burst=" + rest[i]
			fallthrough
		case strings.HasPrefix(a, "--burst=") || strings.HasPrefix(a, "-burst="):
			_, v, _ := strings.Cut(a, "=")
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > queue.MaxBurst {
				return badInput("--burst %q: give a whole number from 1 to %d", v, queue.MaxBurst)
			}
			burst = n
		default:
			args = append(args, a)
		}
	}
	if len(args) < 2 {
		return badInput("give a limit's name and a rate, or off: limit rate kind:KIND 14/s [--burst 5] [--per FIELD], limit rate queue:QUEUE 600/m, limit rate NAME off")
	}
	name, val := args[0], strings.Join(args[1:], " ")
	if _, _, err := queue.ParseLimitName(name); err != nil {
		return badInput("%s", shown(err.Error()))
	}
	if val == "off" {
		if burst > 0 || per != "" {
			return badInput("--burst and --per have no meaning with off: limit rate %s off", shown(name))
		}
		had, err := e.q.ClearRate(e.ctx, name)
		return e.reportChange(name, had, err, fmt.Sprintf("no rate limit: workers apply it within %s", queue.LimitRefresh), "had no rate limit")
	}
	r, err := queue.ParseRate(val)
	if err != nil {
		return badInput("%s", shown(err.Error()))
	}
	if burst > 0 {
		r.Burst = burst
	}
	if per != "" {
		r.By = per
	}
	if err := e.q.SetRate(e.ctx, name, r, by); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s\trate %s: workers apply it within %s\n", shown(name), shown(r.String()), queue.LimitRefresh)
	return nil
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
	Name      string     `json:"name"`
	Rate      string     `json:"rate"`
	Burst     int        `json:"burst"`
	BurstUsed int        `json:"burstUsed"`
	Starts    int64      `json:"starts"`
	NextStart *time.Time `json:"nextStart,omitempty"`
	Waiting   int64      `json:"waiting"`
	Malformed string     `json:"malformed,omitempty"`
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
			t := r.NextStart
			j.NextStart = &t
		}
		out = append(out, j)
	}
	return out
}
