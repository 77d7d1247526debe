package cli

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/docketq/docket/queue"
)

func init() {
	ctlCommands["limit"] = subcommand{"limit how many jobs of a kind or queue run at once across every worker: `limit kind:K N`, `limit queue:Q N`, `limit NAME off`; per value of an args field: `limit kind:K N --per FIELD`, `limit NAME off --per FIELD`; rates: `limit rate kind:K 14/s --burst 5`, per value of an args field: `limit rate kind:K 10/m --burst 2 --per FIELD`, `limit rate NAME off`; alone, list the limits and rates", ctlLimit}
}

// ctlLimit sets, clears or lists the concurrency limits.
func ctlLimit(fs *flag.FlagSet) func(*env, []string) error {
	by := fs.String("by", "", "who sets it, recorded with the limit (default: user@host)")
	per := fs.String("per", "", "an args field (customerId, or a dotted path): the limit applies to each of its values, beside the limit's total (may follow the arguments)")
	return func(e *env, rest []string) error {
		if len(rest) > 0 && rest[0] == "rate" {
			if *by == "" {
				*by = operator()
			}
			return ctlRate(e, rest[1:], *by) // rate.go
		}
		rest, err := trailingFlag(rest, "per", per)
		if err != nil {
			return err
		}
		switch len(rest) {
		case 0:
			if *per != "" {
				return badInput("--per needs a limit's name and a number, or off: limit kind:KIND N --per FIELD")
			}
			return listLimits(e)
		case 2:
		default:
			return badInput("give a limit's name and a number, or off: limit kind:KIND N, limit queue:QUEUE N [--per FIELD]")
		}
		if *by == "" {
			*by = operator()
		}
		name, val := rest[0], rest[1]
		if _, _, err := queue.ParseLimitName(name); err != nil {
			return badInput("%s", shown(err.Error()))
		}
		if *per != "" {
			return ctlPartition(e, name, val, *per, *by)
		}
		if val == "off" {
			had, err := e.q.ClearLimit(e.ctx, name)
			return e.reportChange(name, had, err, fmt.Sprintf("unlimited: workers apply it within %s", queue.LimitRefresh), "had no limit")
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

// ctlPartition sets (val a number) or clears (val off) the partition
// limit of name by the args field per.
func ctlPartition(e *env, name, val, per, by string) error {
	if err := queue.ValidPartitionArg(per); err != nil {
		return badInput("--per: %s", shown(err.Error()))
	}
	if val == "off" {
		had, err := e.q.ClearPartitionLimit(e.ctx, name)
		done := fmt.Sprintf("no partition limit (its total, if any, stays): workers apply it within %s", queue.LimitRefresh)
		return e.reportChange(name, had, err, done, "had no partition limit")
	}
	n, err := strconv.Atoi(val)
	if err != nil || n < 0 || n > queue.MaxLimit {
		return badInput("limit %q: give a whole number from 0 to %d, or off", val, queue.MaxLimit)
	}
	if err := e.q.SetPartitionLimit(e.ctx, name, per, n, by); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s\tlimit %d per %s: workers apply it within %s\n", shown(name), n, shown(per), queue.LimitRefresh)
	return nil
}

// trailingFlag takes --NAME VALUE or --NAME=VALUE (one dash or two) out of
// rest, where it may follow the arguments, into *value; an empty
// --NAME= is refused.
func trailingFlag(rest []string, name string, value *string) ([]string, error) {
	var out []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		switch {
		case a == "--"+name || a == "-"+name:
			if i+1 == len(rest) {
				return nil, badInput("--%s needs a value", name)
			}
			i++
			*value = rest[i]
		case strings.HasPrefix(a, "--"+name+"=") || strings.HasPrefix(a, "-"+name+"="):
			if _, *value, _ = strings.Cut(a, "="); *value == "" {
				return nil, badInput("--%s needs a value", name)
			}
		default:
			out = append(out, a)
		}
	}
	return out, nil
}

// listLimits prints the concurrency limits (running / limit, partitions,
// who set them), then the rates under a header of their own.
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
	if len(ls) > 0 {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "limit\trunning\tset")
		for _, l := range ls {
			fmt.Fprintf(tw, "%s\t%s\n", shown(l.Name), limitNote(l))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(rates) > 0 {
		if len(ls) > 0 {
			fmt.Fprintln(e.stdout)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "rate\tlimit\tuse\tset")
		printRates(tw, rates) // rate.go
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// limitNote says how a limit reads in a table: running / limit, set.
func limitNote(l queue.RunLimit) string {
	if l.Malformed != "" {
		return "-\tmalformed, limits nothing: " + shown(l.Malformed) + "; `docketctl limit` rewrites it"
	}
	// When it was set and by whom: the later of the total and the
	// partition limit.
	at, by := l.SetAt, l.SetBy
	if l.PartitionBy != "" && (l.NoTotal || l.PartitionSetAt.After(at)) {
		at, by = l.PartitionSetAt, l.PartitionSetBy
	}
	set := ""
	if !at.IsZero() {
		set = at.Format(time.RFC3339)
	}
	if by != "" {
		set += " by " + shown(by)
	}
	use := fmt.Sprintf("%d / %d", l.Running, l.Limit)
	if l.NoTotal {
		use = fmt.Sprintf("%d", l.Running)
	}
	if l.PartitionBy != "" {
		use += fmt.Sprintf(", %d per %s (%d of %d partitions running full)", l.PartitionLimit, shown(l.PartitionBy), l.Saturated, l.Partitions)
	}
	return fmt.Sprintf("%s\t%s", use, set)
}
