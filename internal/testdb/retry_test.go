package testdb

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

func TestTransient(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"not writable primary", mongo.CommandError{Code: 10107, Name: "NotWritablePrimary"}, true},
		{"time limit, wrapped", fmt.Errorf("queue: claim: %w", mongo.CommandError{Code: 50}), true},
		{"killed cursor", mongo.CommandError{Code: 43}, true},
		{"write concern error", mongo.WriteException{WriteConcernError: &mongo.WriteConcernError{Code: 64, Name: "WriteConcernFailed"}}, true},
		{"duplicate key", mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 11000}}}, false},
		{"other server error", mongo.CommandError{Code: 2, Name: "BadValue"}, false},
		{"plain error", errors.New("queue: lease lost"), false},
	} {
		t.Run(c.name, func(t *testing.T) { require.Equal(t, c.want, Transient(c.err)) })
	}
}

func TestRetryInsertTakesADuplicateAfterARetryAsDone(t *testing.T) {
	dup := mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 11000}}}
	refused := mongo.CommandError{Code: 10107}
	replies := []error{refused, dup}
	calls := 0
	next := func() error { calls++; return replies[calls-1] }
	require.NoError(t, RetryInsert(t.Logf, "insert", next))
	require.Equal(t, 2, calls)

	calls, replies = 0, []error{dup}
	require.ErrorAs(t, RetryInsert(t.Logf, "insert", next), &mongo.WriteException{}, "a first send's duplicate is the caller's")
	calls, replies = 0, []error{refused, dup}
	require.ErrorAs(t, Retry(t.Logf, "update", next), &mongo.WriteException{}, "Retry returns a duplicate")
}
