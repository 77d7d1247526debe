// Package docketotel traces a docket.Client with OpenTelemetry, following
// the semantic conventions for messaging (messaging.system "docket"):
//
//   - a PRODUCER span "send QUEUE" for each Insert and InsertMany, whose
//     context every job it inserts carries in its document as a W3C
//     traceparent (and tracestate), unless the insert set one already;
//   - a CONSUMER span "process QUEUE" for each attempt, from its start to
//     its outcome written, with the job's id, kind, queue, attempt and
//     outcome; a child of the inserting span, as the conventions allow for
//     a message processed alone, and linked to it (Config.NewTrace makes
//     it the root of a trace of its own, linked only);
//   - a CLIENT span "settle QUEUE" for the attempt's finishing write, a
//     child of the attempt's span, from the handler's return until the
//     outcome is written or given up.
//
// A traceparent written by another program (any language's driver can set
// the field) is continued the same way; one that does not parse, or is
// not a string, is ignored. Instrument a client before it starts:
//
//	c, err := docket.NewClient(db, cfg)
//	if err := docketotel.Instrument(c, docketotel.Config{TracerProvider: tp}); err != nil { ... }
//
// See docs/GO-API.md#tracing. The package is separate so that a program
// embedding docket without OpenTelemetry does not import it.
package docketotel
