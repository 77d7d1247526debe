package cli

import (
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/docketq/docket/queue"
)

func init() {
	ctlCommands["limit"] = subcommand{"limit how many jobs of a kind or queue run at once across every worker: `limit kind:K N`, `limit queue:Q N`, `limit NAME off`; rates: `limit rate kind:K 14/s --burst 5`, `limit rate NAME off`; alone, list the limits and rates", ctlLimit}
}

// ctlLimit sets, clears or lists the concurrency limits.
func ctlLimit(fs *flag.FlagSet) func(*env, []string) error {
	by := fs.String("by", "", "who sets it, recorded with the limit (default: user@host)")
	return func(e *env, rest []string) error {
		switch len(rest) {
		case 0:
			return listLimits(e)
		case 2:
		default:
			if rest[0] == "rate" {
				break
			}
			return badInput("give a limit's name and a number, or off: limit kind:KIND N, limit queue:QUEUE N")
		}
		if *by == "" {
			*by = operator()
		}
		if rest[0] == "rate" {
			return ctlRate(e, rest[1:], *by) // rate.go
		}
		name, val := rest[0], rest[1]
		if _, _, err := queue.ParseLimitName(name); err != nil {
			return badInput("%s", shown(err.Error()))
		}
		if *by == "" {
			*by = operator()
		}
		if val == "off" {
			had, err := e.q.ClearLimit(e.ctx, name)
			if err != nil {
				return err
			}
			if had {
				fmt.Fprintf(e.stdout, "%s\tunlimited: workers apply it within %s\n", shown(name), queue.LimitRefresh)
			} else {
				fmt.Fprintf(e.stdout, "%s\thad no limit; nothing changed\n", shown(name))
			}
			return nil
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 || n > queue.MaxLimit {
			return badInput("limit %q: give a whole number from 0 to %d, or off", val, queue.MaxLimit)
		}
		if err := e.q.SetLimit(e.ctx, name, n, *by); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s\tlimit %d: workers apply it within %s\n", shown(name), n, queue.LimitRefresh)
		return nil
	}
}

// listLimits prints the limits: limit, running now, who set it.
func listLimits(e *env) error {
	ls, err := e.q.RunLimits(e.ctx)
	if err != nil {
		return err
	}
	rates, err := e.q.RateLimits(e.ctx)
	if err != nil {
		return err
	}
	if len(ls) == 0 && len(rates) == 0 {
		fmt.Fprintln(e.stdout, "no limit is set")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if len(ls) > 0 {
		fmt.Fprintln(tw, "limit\trunning\tset")
	}
	for _, l := range ls {
		fmt.Fprintf(tw, "%s\t%s\n", shown(l.Name), limitNote(l))
	}
	printRates(tw, rates) // rate.go
	return tw.Flush()
}

// limitNote says how a limit reads in a table: running / limit, set.
func limitNote(l queue.RunLimit) string {
	if l.Malformed != "" {
		return "-\tmalformed, limits nothing: " + shown(l.Malformed) + "; `docketctl limit` rewrites it"
	}
	set := ""
	if !l.SetAt.IsZero() {
		set = l.SetAt.Format(time.RFC3339)
	}
	if l.SetBy != "" {
		set += " by " + shown(l.SetBy)
	}
	return fmt.Sprintf("%d / %d\t%s", l.Running, l.Limit, set)
}
