package metrics

import "github.com/docketq/docket/internal/printable"

// DefaultMaxQueues is how many queues the leader's queue gauges export
// one by one: the queues with the most jobs, the rest summed under
// OtherQueues. Queue names come from the stored jobs, which any
// application may write, so their number is not docket's to bound.
const DefaultMaxQueues = 100

// OtherQueues is the queue label of the series that sum the queues past
// QueueStatsConfig.MaxQueues (a queue literally named so is summed there
// too).
const OtherQueues = "(other)"

// OtherState is the state label of the jobs whose stored state is none of
// docket's (another application's documents).
const OtherState = "(other)"

// labelValue returns s fit for a label value: as it is when it is valid
// UTF-8 of printable characters, else quoted with Go's escapes ("mail\xff"),
// so that no stored string can make the registry refuse a metric (a label
// value must be UTF-8: client_golang panics in MustNewConstMetric and
// WithLabelValues otherwise) or put control characters on a terminal
// that reads /metrics. Distinct strings may meet in one label value (a
// queue named "mail\xff" with the quotes typed): the callers sum what
// meets.
func labelValue(s string) string { return printable.Quoted(s) }
