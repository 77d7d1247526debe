package handlers_test

import (
	"testing"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// FuzzDecodeArgs feeds arbitrary bytes, as a job's args, to the decoding and
// validation of every handler's args type: it must never panic, every error
// must be permanent (the job dies with it instead of retrying forever), and
// args that pass must be valid. The seed corpus (testdata/fuzz) holds the
// bad input of the e2e corpus: wrong types, operator-looking values,
// non-documents, a name over the limit.
//
//	go test -run '^$' -fuzz FuzzDecodeArgs ./handlers
func FuzzDecodeArgs(f *testing.F) {
	for _, seed := range []any{
		bson.D{},
		handlers.AddFriendArgs{UserA: "u1", UserB: "u2"},
		bson.D{{Key: "userA", Value: 1}, {Key: "userB", Value: 2}},
		bson.D{{Key: "userA", Value: bson.D{{Key: "$gt", Value: ""}}}, {Key: "userB", Value: "u2"}},
		handlers.RenameArgs{UserID: "u1", NewName: "$where"},
		bson.D{{Key: "userId", Value: "u1"}, {Key: "sync", Value: "yes"}},
		bson.D{{Key: "txId", Value: 5.5}},
		handlers.TransferArgs{TxID: "t1"},
	} {
		b, err := bson.Marshal(seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte("u1,u2"))
	f.Fuzz(func(t *testing.T, data []byte) {
		raw := bson.Raw(data)
		check := func(kind string, err error, validate func() error) {
			if err != nil {
				if !jobs.IsPermanent(err) {
					t.Errorf("%s: a decoding error that is not permanent retries forever: %v", kind, err)
				}
				return
			}
			if verr := validate(); verr != nil {
				t.Errorf("%s: args decoded but do not validate: %v", kind, verr)
			}
		}
		a, err := jobs.DecodeArgs[handlers.AddFriendArgs](raw)
		check(handlers.AddFriendKind, err, a.Validate)
		r, err := jobs.DecodeArgs[handlers.RenameArgs](raw)
		check(handlers.RenameKind, err, r.Validate)
		x, err := jobs.DecodeArgs[handlers.TransferArgs](raw)
		check(handlers.TransferKind, err, x.Validate)
		_, err = jobs.DecodeArgs[handlers.NoopArgs](raw)
		check("noop", err, func() error { return nil })
	})
}
