package jobs

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Limits on what a job document may hold, so that every server docket
// supports stores it as given (see CheckArgs).
const (
	// MaxArgsDepth is how deep args may nest: the args document is level 1,
	// each document or array inside adds one. With the job document around
	// them, the stored document stays within MongoDB's 100 levels.
	MaxArgsDepth = 99
	// MaxNameBytes bounds a job's id, kind and queue.
	MaxNameBytes = 256
	// MaxUniqueKeyBytes bounds a job's unique key.
	MaxUniqueKeyBytes = 1024
)

// CheckArgs reports the first part of doc that a MongoDB-protocol server
// would refuse, alter or lose, as an *ArgsError whose Field is the path to
// the document that holds it (empty for the top level, "items[2].meta"
// deeper). Docket refuses these in args so that an enqueue either writes
// every job as given or nothing, on MongoDB and on devdb (FerretDB) alike:
//
//   - a key that is empty, starts with '$', contains '.', is not valid
//     UTF-8, or appears twice in one document (at any depth, arrays of
//     documents included); MongoDB 5+ stores some '$' and '.' keys, but
//     not every server or query can reach them, so docket never writes them;
//   - a double that is NaN or infinite;
//   - a string that is not valid UTF-8;
//   - an array directly inside an array;
//   - the types FerretDB cannot store and MongoDB deprecates or treats
//     specially: decimal128, JavaScript code (with or without scope),
//     symbol, undefined, DBPointer, MinKey and MaxKey;
//   - nesting deeper than MaxArgsDepth.
//
// doc must be a valid BSON document (bson.Raw.Validate).
func CheckArgs(doc bson.Raw) error {
	return checkDocument(doc, "", 1, false)
}

func checkDocument(doc bson.Raw, path string, depth int, array bool) error {
	if depth > MaxArgsDepth {
		return &ArgsError{Field: path, Reason: fmt.Sprintf("nested more than %d levels deep", MaxArgsDepth)}
	}
	elems, err := doc.Elements()
	if err != nil {
		return &ArgsError{Field: path, Reason: fmt.Sprintf("not a valid BSON document: %v", err)}
	}
	var seen map[string]struct{}
	if !array && len(elems) > 1 {
		seen = make(map[string]struct{}, len(elems))
	}
	for i, e := range elems {
		key := e.Key()
		var here string
		if array {
			here = path + "[" + strconv.Itoa(i) + "]"
		} else {
			if reason := keyProblem(key); reason != "" {
				return &ArgsError{Field: path, Reason: fmt.Sprintf("key %q %s", key, reason)}
			}
			if seen != nil {
				if _, dup := seen[key]; dup {
					return &ArgsError{Field: path, Reason: fmt.Sprintf("key %q appears twice in one document", key)}
				}
				seen[key] = struct{}{}
			}
			here = key
			if path != "" {
				here = path + "." + key
			}
		}
		if err := checkValue(e.Value(), here, depth, array); err != nil {
			return err
		}
	}
	return nil
}

// keyProblem says what is wrong with a document key, or "" if nothing.
func keyProblem(key string) string {
	switch {
	case key == "":
		return "is empty"
	case strings.HasPrefix(key, "$"):
		return "starts with '$'"
	case strings.Contains(key, "."):
		return "contains '.'"
	case !utf8.ValidString(key):
		return "is not valid UTF-8"
	}
	return ""
}

func checkValue(v bson.RawValue, path string, depth int, inArray bool) error {
	invalid := func(format string, a ...any) error {
		return &ArgsError{Field: path, Reason: fmt.Sprintf(format, a...)}
	}
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		return checkDocument(v.Document(), path, depth+1, false)
	case bson.TypeArray:
		if inArray {
			return invalid("an array directly inside an array (devdb, FerretDB v1, refuses nested arrays; wrap the inner one in a document)")
		}
		return checkDocument(bson.Raw(v.Array()), path, depth+1, true)
	case bson.TypeDouble:
		if f := v.Double(); math.IsNaN(f) || math.IsInf(f, 0) {
			return invalid("%v is not a number docket stores; use null or a string", f)
		}
	case bson.TypeString:
		if !utf8.ValidString(v.StringValue()) {
			return invalid("string is not valid UTF-8")
		}
	case bson.TypeDecimal128:
		return invalid("decimal128 is not supported (devdb, FerretDB v1, cannot store it); use a string or an integer of the smallest unit")
	case bson.TypeJavaScript, bson.TypeCodeWithScope, bson.TypeSymbol, bson.TypeUndefined,
		bson.TypeDBPointer, bson.TypeMinKey, bson.TypeMaxKey:
		return invalid("BSON type %s is not supported in args", typeName(v.Type))
	}
	return nil
}

func typeName(t bson.Type) string {
	switch t {
	case bson.TypeJavaScript:
		return "JavaScript code"
	case bson.TypeCodeWithScope:
		return "JavaScript code with scope"
	case bson.TypeSymbol:
		return "symbol"
	case bson.TypeUndefined:
		return "undefined"
	case bson.TypeDBPointer:
		return "DBPointer"
	case bson.TypeMinKey:
		return "MinKey"
	case bson.TypeMaxKey:
		return "MaxKey"
	}
	return t.String()
}

// NameProblem says what is wrong with a job's id, kind, queue or unique
// key s, limited to max bytes, or returns "" when nothing is: it must not
// be empty, must be valid UTF-8 (a server may replace invalid bytes) and at
// most max bytes long.
func NameProblem(s string, max int) string {
	switch {
	case s == "":
		return "must not be empty"
	case !utf8.ValidString(s):
		return fmt.Sprintf("%q is not valid UTF-8", s)
	case len(s) > max:
		return fmt.Sprintf("%d bytes is over the %d-byte limit", len(s), max)
	}
	return ""
}
