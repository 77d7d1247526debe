package queue

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// JobID is a job's _id as stored, of whatever BSON type: a string for
// every job docket enqueues; a number, an ObjectId or anything else for a
// job another application wrote. Its Token names it in a URL or on a
// command line, and ParseJobID reads the token back as the same id, type
// included. The zero JobID names no job.
type JobID struct{ v bson.RawValue }

// StringJobID is the JobID of the string id s.
func StringJobID(s string) JobID {
	t, b, _ := bson.MarshalValue(s) // a string always marshals
	return JobID{bson.RawValue{Type: t, Value: b}}
}

// Equal reports whether id and other are the same id, of the same type.
func (id JobID) Equal(other JobID) bool {
	return id.v.Type == other.v.Type && bytes.Equal(id.v.Value, other.v.Value)
}

// IsZero reports whether id names no job.
func (id JobID) IsZero() bool { return id.v.Type == 0 }

// StringID returns the id and true when it is a string.
func (id JobID) StringID() (string, bool) { return id.v.StringValueOK() }

// String is the id for people: a string id as it is, another id in
// MongoDB extended JSON ({"$numberInt":"7"}).
func (id JobID) String() string {
	if s, ok := id.v.StringValueOK(); ok {
		return s
	}
	if id.IsZero() {
		return ""
	}
	return id.v.String()
}

// typedMark starts the token of an id that is not a plain string.
const typedMark = '@'

// Token names the id in a URL path segment, a query and a command line,
// without quoting: a string id made only of letters, digits and
// "-_.:+,/@" (every id docket makes) is itself; any other id is
// "@" and the base64url of its BSON type and value, which reads back as
// that type and value. A string id that starts with "@" is never its own
// token, so the two forms cannot be confused.
func (id JobID) Token() string {
	if id.IsZero() {
		return ""
	}
	if s, ok := id.v.StringValueOK(); ok && plainToken(s) {
		return s
	}
	return string(typedMark) + base64.RawURLEncoding.EncodeToString(append([]byte{byte(id.v.Type)}, id.v.Value...))
}

// plainToken reports whether the string id s is its own token: not empty,
// not a path's "." or "..", not starting with the typed mark, and only
// characters that need no escaping in a shell word.
func plainToken(s string) bool {
	if s == "" || s == "." || s == ".." || s[0] == typedMark {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '_', c == '.', c == ':', c == '+', c == ',', c == '/', c == '@':
		default:
			return false
		}
	}
	return true
}

// errBadJobID is returned by ParseJobID for a token that names no id.
var errBadJobID = errors.New("not a job id")

// ParseJobID reads a token made by JobID.Token. A token that does not
// start with "@" is a string id, whatever its characters, so an id typed
// by hand works too; "" is the zero JobID. A token of a value no _id can hold
// that a filter reads as a query (a regex, an array, a document with a
// "$" key) is refused: it would name the jobs it matches.
func ParseJobID(token string) (JobID, error) {
	if token == "" {
		return JobID{}, nil
	}
	if token[0] != typedMark {
		return StringJobID(token), nil
	}
	b, err := base64.RawURLEncoding.DecodeString(token[1:])
	if err != nil || len(b) == 0 {
		return JobID{}, fmt.Errorf("%.40q: %w: a token starting with %q is base64url (the id's BSON type and value)", token, errBadJobID, typedMark)
	}
	v := bson.RawValue{Type: bson.Type(b[0]), Value: append([]byte(nil), b[1:]...)}
	// A value is valid when it is the whole of a one-element document.
	doc, err := bson.Marshal(bson.D{{Key: "v", Value: v}})
	if err == nil {
		err = bson.Raw(doc).Validate()
	}
	if err == nil {
		var elems []bson.RawElement
		if elems, err = bson.Raw(doc).Elements(); err == nil && len(elems) != 1 {
			err = errors.New("trailing bytes")
		}
	}
	if err != nil {
		return JobID{}, fmt.Errorf("%.40q: %w: its bytes are not one BSON value", token, errBadJobID)
	}
	if queryLike(v) {
		return JobID{}, fmt.Errorf("%.40q: %w: no _id is a %s, and a filter would read it as a query", token, errBadJobID, v.Type)
	}
	return JobID{v}, nil
}

// queryLike reports whether v is a value no _id can hold and a filter
// reads as a query, not a value: a regex (a pattern), an array (any of its
// elements) or a document with a "$" key (operators).
func queryLike(v bson.RawValue) bool {
	switch v.Type {
	case bson.TypeRegex, bson.TypeArray:
		return true
	case bson.TypeEmbeddedDocument:
		elems, _ := v.Document().Elements()
		for _, e := range elems {
			if strings.HasPrefix(e.Key(), "$") {
				return true
			}
		}
	}
	return false
}

// JobIDOf reads the _id of a stored job document.
func JobIDOf(doc bson.Raw) JobID {
	v := doc.Lookup("_id")
	return JobID{bson.RawValue{Type: v.Type, Value: append([]byte(nil), v.Value...)}}
}

// JobIDOfJob is the id of j as stored: its StoredID when it has one (a
// job GetJobID read whose _id is not a string), else its string ID.
func JobIDOfJob(j *jobs.Job) JobID {
	if j.StoredID.Type != 0 {
		return JobID{bson.RawValue{Type: j.StoredID.Type, Value: append([]byte(nil), j.StoredID.Value...)}}
	}
	return StringJobID(j.ID)
}

// idBrackets are the BSON types, by their $type aliases, in MongoDB's
// order of comparison and sorting: values of one bracket compare by value
// with each other (a long with a double), and every value of a bracket
// sorts before every value of the next.
var idBrackets = [][]string{
	{"minKey"}, {"null", "undefined"}, {"int", "long", "double", "decimal"}, {"string", "symbol"},
	{"object"}, {"array"}, {"binData"}, {"objectId"}, {"bool"}, {"date"}, {"timestamp"}, {"regex"},
	{"dbPointer"}, {"javascript"}, {"javascriptWithScope"}, {"maxKey"},
}

// typeAliases maps a BSON type to its $type alias.
var typeAliases = map[bson.Type]string{
	bson.TypeMinKey: "minKey", bson.TypeNull: "null", bson.TypeUndefined: "undefined",
	bson.TypeInt32: "int", bson.TypeInt64: "long", bson.TypeDouble: "double", bson.TypeDecimal128: "decimal",
	bson.TypeString: "string", bson.TypeSymbol: "symbol", bson.TypeEmbeddedDocument: "object", bson.TypeArray: "array",
	bson.TypeBinary: "binData", bson.TypeObjectID: "objectId", bson.TypeBoolean: "bool", bson.TypeDateTime: "date",
	bson.TypeTimestamp: "timestamp", bson.TypeRegex: "regex", bson.TypeDBPointer: "dbPointer",
	bson.TypeJavaScript: "javascript", bson.TypeCodeWithScope: "javascriptWithScope", bson.TypeMaxKey: "maxKey",
}

// storableOnly are the aliases of the types that a server lacking them
// (Server.TypeAliases in internal/store: it stores none of these, and
// refuses their aliases in $type) can leave out of a filter: no document
// of theirs can be there.
var storableOnly = map[string]bool{
	"minKey": true, "undefined": true, "decimal": true, "symbol": true,
	"dbPointer": true, "javascript": true, "javascriptWithScope": true, "maxKey": true,
}

// afterID selects the jobs whose _id sorts after id in MongoDB's order of
// _id values (the order of a sort on _id), whatever their types: those
// greater within id's bracket of types ($gt compares within one bracket
// only), and every id of a later bracket. A job with _id 7 is followed by
// every string id, then every ObjectId. With fewTypes, the types that
// storableOnly lists are left out.
func afterID(id JobID, fewTypes bool) bson.D {
	alias := typeAliases[id.v.Type]
	bracket := slices.IndexFunc(idBrackets, func(b []string) bool { return slices.Contains(b, alias) })
	var or bson.A
	switch id.v.Type {
	case bson.TypeMinKey, bson.TypeMaxKey, bson.TypeNull, bson.TypeUndefined, bson.TypeArray, bson.TypeRegex:
		// Alone in its bracket as an _id, or not comparable with $gt.
	case bson.TypeDouble:
		if f := id.v.Double(); math.IsNaN(f) {
			// NaN sorts before every other number, and $gt NaN matches
			// none.
			or = append(or, bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: math.Inf(-1)}}}})
			break
		}
		fallthrough
	default:
		or = append(or, bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: id.v}}}})
	}
	var later bson.A
	if bracket >= 0 {
		for _, b := range idBrackets[bracket+1:] {
			for _, a := range b {
				if !fewTypes || !storableOnly[a] {
					later = append(later, a)
				}
			}
		}
	}
	if len(later) > 0 {
		or = append(or, bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: later}}}})
	}
	if len(or) == 0 {
		return bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{}}}}}
	}
	return bson.D{{Key: "$or", Value: or}}
}
