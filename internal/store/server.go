package store

import (
	"errors"
	"regexp"
	"strings"
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// This file is the one place where docket adapts to a server that speaks
// MongoDB's protocol without all of MongoDB's features. Everywhere else the
// code is written for MongoDB and names the feature it may have to do
// without (srv.GroupMin.Lacking()), never a product.
//
// The servers docket is known to meet are MongoDB (production) and devdb,
// the embedded FerretDB v1 server (SQLite) that docket's tests and its
// embedded default run (docs/EMBEDDED-SERVER.md says what it lacks). A
// feature is detected by trying it where docket needs it: the first
// command that uses it either works, and the feature is held from then on,
// or is refused with a code that says "not implemented" (which writes
// nothing), and the command is sent again without it and the feature is
// lacking from then on (a refusal after it was held too: a server that
// refuses only what it evaluates, as FerretDB v1 an $elemMatch, answers a
// command that met nothing to evaluate). Nothing is inferred from the
// server's name or version (FerretDB reports itself in buildInfo, but a
// later FerretDB, or another server, may implement what this one lacks).
// Until a feature is found lacking, the code uses it: on MongoDB detection
// costs nothing.
//
// The features (the fields of Server):
//
//   - FindAndModifyProjection: findAndModify's fields option. MongoDB
//     returns only the fields asked for, so the completion of a job with
//     dependents (CompleteReading) returns what their settle reads, not the
//     job's args and result. FerretDB v1 refuses the option
//     (NotImplemented, 238), writing nothing; the completion is sent again
//     without it and returns the whole job. Detected by a client's first
//     such completion.
//   - ElemMatchNot: $not inside an $elemMatch of operators, tested on
//     each element ({$elemMatch: {$not: {$in: ids}}}: an element not among
//     ids). MongoDB has it: a settle of several parents releases the
//     dependents that wait for none but them ({$not: {$elemMatch: …}}) in
//     one write each, before the pull. FerretDB v1 refuses it
//     (NotImplemented, 238) at the first blocked dependent it tests,
//     writing none of that statement (devdb, whose $elemMatch tests each
//     element as MongoDB's does, has it); the settle is sent again without
//     it (what earlier chunks of its dependents wrote repeats as no-ops): a
//     pull, then a release of those left waiting for nothing, two writes
//     per dependent (package queue's depsbatch.go). Detected by the first
//     such settle that meets a blocked dependent. (FerretDB v1 applies an
//     $elemMatch of operators to the array as a whole, so docket sends none
//     that such a server would answer otherwise than MongoDB.)
//   - GroupMin: the $min accumulator of $group. MongoDB has it: Stats finds
//     each queue's oldest available job in the one $group that counts.
//     FerretDB v1 has only $sum and $count (NotImplemented, 238); Stats and
//     Overview then count in one find of their own over the collection
//     (scanStats in package queue). Detected by the first Stats.
//   - TypeAliases: a $type alias for every BSON type. MongoDB knows them
//     all: List pages through _ids of any type in MongoDB's order of types.
//     FerretDB v1 stores none of minKey, maxKey, undefined, decimal, symbol,
//     dbPointer and javascript, and refuses their aliases (BadValue, 2, or
//     NotImplemented); List's paging then leaves them out, as no document
//     can hold them. Detected by the first List that pages.
//
// Error forms, recognised on every server (no detection: a form a server
// does not use is never seen):
//
//   - A duplicate key. MongoDB answers E11000 (a write error of code
//     11000) naming the index: "index: <name> dup key: {…}". FerretDB v1
//     answers an insert's duplicate so too, without the index's name, but
//     an update's (and a createIndexes refused for duplicates) as a command
//     error quoting SQLite: "UNIQUE constraint failed: index
//     '<collection>_<hash>_<name>'". In an unordered bulkWrite it stops at
//     that update: those before it may be applied, none after it.
//     IsDuplicateKey and DuplicateIndex read both forms; DuplicateCommand
//     tells the second.
//
// Features docket does without on every server, so that one design serves
// both (docket never sends them, so there is nothing to detect):
//
//   - TTL indexes: MongoDB could expire the workers registry's documents
//     (package queue's workers.go); FerretDB v1 has none, so a listing
//     deletes the long-gone processes' documents itself.
//   - Pipeline updates ([{$set: …}]), which would let one updateMany give
//     each job of a batch claim a token of its own: FerretDB v1 has none,
//     and one token per batch fences as well (batch.go).
//   - $pull with an $in condition: FerretDB v1 accepts it and removes
//     nothing, so a dependent's waiting list loses its finished parents
//     by $pullAll, the same update on MongoDB (package queue's deps.go).
//   - Multi-document transactions, change streams, partial indexes,
//     $lookup, $push with $slice: FerretDB v1 lacks or ignores them.
//
// What shapes performance without changing behaviour, for the comments
// that mention "a server that scans": FerretDB v1 looks up by index only a
// filter on _id alone (an equality, or an $in), evaluates every other filter
// in Go over every document, key by key in the filter's order, and devdb
// runs one write at a time (for single-document atomicity), reads beside
// it. So docket's filters put _id first where they have it, and an
// equality rather than an $in of one; both are the same plan on MongoDB.
// FerretDB v1 also does not report an index's sparseness in listIndexes,
// so an index made by hand is matched on its keys and uniqueness only
// (package queue's equivalentExists), and its createIndexes fails on an
// index that exists, so docket asks only for the missing ones, which is
// cheaper on MongoDB too.

// Server is what a client found out about its server's features. One is
// shared by a Store, its copies and the queue.Client that holds it; its
// fields are safe for concurrent use.
type Server struct {
	// FindAndModifyProjection is findAndModify's fields option
	// (CompleteReading).
	FindAndModifyProjection Feature
	// ElemMatchNot is $not inside an $elemMatch of operators (a settle's
	// release of the dependents its parents free).
	ElemMatchNot Feature
	// GroupMin is the $min accumulator of $group (Stats).
	GroupMin Feature
	// TypeAliases is $type's alias of every BSON type (List's paging).
	TypeAliases Feature
}

func newServer() *Server {
	s := &Server{}
	s.FindAndModifyProjection.refusal = []int{codeNotImplemented}
	s.ElemMatchNot.refusal = []int{codeNotImplemented}
	s.GroupMin.refusal = []int{codeNotImplemented}
	s.TypeAliases.refusal = []int{codeBadValue, codeNotImplemented}
	return s
}

// Server returns what s found out about its server's features.
func (s *Store) Server() *Server { return s.server }

// Feature is one feature of the server: unknown until a command that uses
// it is answered, then held or lacking.
type Feature struct {
	state   atomic.Int32
	refusal []int // the codes with which a server refuses it
}

const (
	featureUnknown int32 = iota
	featureHeld
	featureLacking
)

// Lacking reports whether the server was found to lack f. An unknown
// feature is not lacking: the code tries it.
func (f *Feature) Lacking() bool { return f.state.Load() == featureLacking }

// State is "unknown", "held" or "lacking".
func (f *Feature) State() string {
	switch f.state.Load() {
	case featureHeld:
		return "held"
	case featureLacking:
		return "lacking"
	}
	return "unknown"
}

// Set records that the server holds f or lacks it, as detection would:
// tests force a path with it.
func (f *Feature) Set(held bool) {
	if held {
		f.state.Store(featureHeld)
	} else {
		f.state.Store(featureLacking)
	}
}

// Detect learns from err, the outcome of a command that used f: it
// reports whether the server refused f (the command wrote nothing; the
// caller sends it again without f), and then records f as lacking. A
// command answered otherwise (no error, no document, a write error)
// records f as held; a command not answered (a network error) teaches
// nothing.
func (f *Feature) Detect(err error) (refused bool) {
	var se mongo.ServerError
	switch {
	case err == nil, errors.Is(err, mongo.ErrNoDocuments):
		f.state.CompareAndSwap(featureUnknown, featureHeld)
		return false
	case !errors.As(err, &se):
		return false
	}
	for _, code := range f.refusal {
		if se.HasErrorCode(code) {
			f.state.Store(featureLacking)
			return true
		}
	}
	f.state.CompareAndSwap(featureUnknown, featureHeld)
	return false
}

// Server error codes.
const (
	codeBadValue       = 2
	codeNotImplemented = 238
)

// sqliteUnique is how FerretDB v1 with SQLite words a duplicate it answers
// as a command error.
const sqliteUnique = "UNIQUE constraint failed"

// IsDuplicateKey reports whether err is a server refusing a write (or an
// index) for a duplicate under a unique index, in either form above.
func IsDuplicateKey(err error) bool {
	return err != nil && (mongo.IsDuplicateKeyError(err) || DuplicateCommand(err))
}

// DuplicateCommand reports whether err is a duplicate key answered as a
// command error rather than as a write error: a bulkWrite that got it
// applied none of its writes after the refused one.
func DuplicateCommand(err error) bool {
	return err != nil && strings.Contains(err.Error(), sqliteUnique)
}

var (
	e11000Index = regexp.MustCompile(`index: (\S+) dup key`)
	sqliteIndex = regexp.MustCompile(sqliteUnique + `: index '([^']*)'`)
)

// DuplicateIndex returns the name of the index that err, a duplicate key,
// names; "" when its message names none. Of an index name in SQLite's form
// ('<collection>_<hash>_<name>') it returns the whole quoted name: check it
// with DuplicateIndexIs.
func DuplicateIndex(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	if m := e11000Index.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	if m := sqliteIndex.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	return ""
}

// DuplicateIndexIs reports whether err is a duplicate key under the index
// called name.
func DuplicateIndexIs(err error, name string) bool {
	got := DuplicateIndex(err)
	return got == name || strings.HasSuffix(got, "_"+name)
}
