package e2e

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/docketq/docket/internal/testdb"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// hostileValue is one value another app might store in any field.
type hostileValue struct {
	name string
	v    any
	// missing says the field is left out, not set to v.
	missing bool
	// devdbCloses says devdb closes the connection on a document holding
	// it (FerretDB v1 cannot store it): used on real MongoDB only.
	devdbCloses bool
}

// hostileMarker is in hostile strings: no page may hold it unescaped.
const hostileMarker = "<script>alert(1)</script>"

// hostileStrings are strings built to reach a terminal, a page, a URL or
// a label raw.
var hostileStrings = []hostileValue{
	{name: "empty string", v: ""},
	{name: "ansi colour", v: "\x1b[31mred\x1b[0m"},
	{name: "carriage return", v: "done\rFAKE"},
	{name: "newline and tab", v: "a\nb\tc"},
	{name: "bell backspace", v: "\a\bx\x7f"},
	{name: "osc title", v: "\x1b]0;owned\x07"},
	{name: "c1 control", v: "a\u0085b\u009bc"},
	{name: "bidi zero width", v: "abc\u202edcba\u200b\ufeff"},
	{name: "invalid utf8", v: "bad\xff\xfe\xc3("},
	{name: "script", v: hostileMarker},
	{name: "attribute break", v: `"><img src=x onerror=alert(1)>`},
	{name: "javascript url", v: "javascript:alert(1)"},
	{name: "path tricks", v: "../../a b/c?d=1#e%zz"},
	{name: "operator", v: "$where"},
	{name: "at sign", v: "@AQID"},
	{name: "long string", v: strings.Repeat("\x1b[2J"+hostileMarker, 4000)},
}

// hostileValues are values of every BSON type, odd ones of the usual
// types, and hostileStrings.
func hostileValues() []hostileValue {
	deep := bson.D{{Key: "x", Value: hostileMarker}}
	for range 60 {
		deep = bson.D{{Key: "d", Value: deep}}
	}
	oid := bson.NewObjectID()
	dec, _ := bson.ParseDecimal128("1E+6144")
	decNaN, _ := bson.ParseDecimal128("NaN")
	vs := []hostileValue{
		{name: "missing", missing: true},
		{name: "null", v: nil},
		{name: "int32 zero", v: int32(0)},
		{name: "int32 negative", v: int32(-1)},
		{name: "int32 max", v: int32(math.MaxInt32)},
		{name: "int64 min", v: int64(math.MinInt64)},
		{name: "int64 max", v: int64(math.MaxInt64)},
		{name: "double NaN", v: math.NaN(), devdbCloses: true},
		{name: "double +Inf", v: math.Inf(1)},
		{name: "double -Inf", v: math.Inf(-1)},
		{name: "double huge", v: 1e308},
		{name: "double fraction", v: 0.5},
		{name: "double negative zero", v: math.Copysign(0, -1)},
		{name: "true", v: true},
		{name: "false", v: false},
		{name: "empty array", v: bson.A{}},
		{name: "nested array", v: bson.A{bson.A{bson.A{int32(1)}}, bson.A{}}},
		{name: "mixed array", v: bson.A{int32(1), "a", nil, bson.D{}, hostileMarker, "\x1b[31m", 1.5}},
		{name: "empty document", v: bson.D{}},
		{name: "operator document", v: bson.D{{Key: "$gt", Value: ""}}},
		{name: "hostile document", v: bson.D{{Key: "message", Value: "\x1b]0;t\x07" + hostileMarker}, {Key: "fraction", Value: 7.5}, {Key: "at", Value: "now"}, {Key: "a\x1bb", Value: int32(1)}}},
		{name: "deep document", v: deep},
		{name: "objectid", v: oid},
		{name: "binary", v: bson.Binary{Subtype: 0, Data: []byte("\x00\x1b[31m\xff")}},
		{name: "binary user", v: bson.Binary{Subtype: 0x80, Data: []byte{1, 2, 3}}},
		{name: "uuid", v: bson.Binary{Subtype: 4, Data: []byte("0123456789abcdef")}},
		{name: "date epoch", v: bson.DateTime(0)},
		{name: "date go zero", v: bson.NewDateTimeFromTime(time.Time{})},
		{name: "date far future", v: bson.DateTime(math.MaxInt64)},
		{name: "date far past", v: bson.DateTime(math.MinInt64)},
		{name: "regex", v: bson.Regex{Pattern: ".*\x1b[31m", Options: "i"}},
		{name: "timestamp", v: bson.Timestamp{T: 1, I: 2}},
		{name: "decimal huge", v: dec, devdbCloses: true},
		{name: "decimal NaN", v: decNaN, devdbCloses: true},
		{name: "minkey", v: bson.MinKey{}, devdbCloses: true},
		{name: "maxkey", v: bson.MaxKey{}, devdbCloses: true},
		{name: "javascript", v: bson.JavaScript("alert(1)"), devdbCloses: true},
		{name: "symbol", v: bson.Symbol("\x1b[31m"), devdbCloses: true},
		{name: "undefined", v: bson.Undefined{}, devdbCloses: true},
	}
	vs = append(vs, hostileStrings...)
	if testdb.RealMongo() {
		return vs
	}
	return slices.DeleteFunc(vs, func(v hostileValue) bool { return v.devdbCloses })
}

// jobFields are the job document's fields (README's schema, and the fields
// workers, workflows and flow control write), and a field of no meaning.
var jobFields = []string{
	"_id", "kind", "queue", "state", "args", "priority", "runAt", "attempt", "maxAttempts", "errors",
	"owner", "leaseToken", "leaseExpiresAt", "heartbeatAt", "cancelRequestedAt", "finishedAt", "releasedToken",
	"after", "waitingOn", "dependentIds", "dependents", "runAnyway", "linking",
	"workflow", "workflowTask", "gate",
	"uniqueKey", "finishedUniqueKey", "uniquePeriodKey", "uniqueUntil",
	"progress", "result", "createdAt", "updatedAt", "traceparent", "tracestate", "limited", "partition", "other",
}

// keyJobFields are given every hostile value; the other fields a sample.
var keyJobFields = map[string]bool{
	"_id": true, "kind": true, "queue": true, "state": true, "args": true, "priority": true, "runAt": true,
	"attempt": true, "maxAttempts": true, "errors": true, "progress": true, "result": true, "workflow": true,
	"after": true, "owner": true,
}

// hostileJob is one generated job document.
type hostileJob struct {
	name string
	doc  bson.D
}

// hostileJobs generates job documents each with one field given a hostile
// value, on a valid base (kind noop on queue default, so that workers
// claim the ones whose other fields let them), in a state that varies so
// that finished, running and blocked jobs carry hostile values too.
func hostileJobs(now time.Time, every int) []hostileJob {
	vals := hostileValues()
	bases := []string{"available", "dead", "running", "blocked", "succeeded"}
	var out []hostileJob
	n := 0
	for fi, field := range jobFields {
		for vi, hv := range vals {
			if (keyJobFields[field] && (vi+fi)%every != 0) || (!keyJobFields[field] && (vi+fi)%(3*every-1) != 0) {
				continue
			}
			n++
			state := bases[n%len(bases)]
			doc := hostileBase(fmt.Sprintf("hostile-%03d", n), state, now)
			doc = setField(doc, field, hv)
			out = append(out, hostileJob{name: field + "=" + hv.name + " (" + state + ")", doc: doc})
		}
	}
	return out
}

// hostileBase is a valid job document in state.
func hostileBase(id, state string, now time.Time) bson.D {
	doc := bson.D{
		{Key: "_id", Value: id}, {Key: "kind", Value: "noop"}, {Key: "queue", Value: "default"}, {Key: "state", Value: state},
		{Key: "args", Value: bson.D{}}, {Key: "priority", Value: int32(0)}, {Key: "runAt", Value: now},
		{Key: "attempt", Value: int32(0)}, {Key: "maxAttempts", Value: int32(3)}, {Key: "errors", Value: bson.A{}},
		{Key: "createdAt", Value: now}, {Key: "updatedAt", Value: now},
	}
	switch state {
	case "running":
		doc = append(doc, bson.E{Key: "owner", Value: "w-gone"}, bson.E{Key: "leaseToken", Value: "t-" + id},
			bson.E{Key: "leaseExpiresAt", Value: now.Add(-time.Minute)}, bson.E{Key: "heartbeatAt", Value: now.Add(-time.Minute)})
		doc[7].Value = int32(1)
	case "dead", "succeeded":
		doc = append(doc, bson.E{Key: "finishedAt", Value: now})
	case "blocked":
		doc = append(doc, bson.E{Key: "after", Value: bson.A{"hostile-parent"}}, bson.E{Key: "waitingOn", Value: bson.A{"hostile-parent"}})
	}
	return doc
}

// setField sets (or, for a missing value, removes) field in doc.
func setField(doc bson.D, field string, hv hostileValue) bson.D {
	out := make(bson.D, 0, len(doc)+1)
	found := false
	for _, e := range doc {
		if e.Key != field {
			out = append(out, e)
			continue
		}
		found = true
		if !hv.missing {
			out = append(out, bson.E{Key: field, Value: hv.v})
		}
	}
	if !found && !hv.missing {
		out = append(out, bson.E{Key: field, Value: hv.v})
	}
	return out
}
