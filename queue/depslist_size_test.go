package queue

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// maxDocumentBytes is MongoDB's bound on a document (16 MiB).
const maxDocumentBytes = 16 << 20

// longIDs is n distinct ids of jobs.MaxNameBytes bytes.
func longIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		s := fmt.Sprintf("%d-", i)
		out[i] = s + strings.Repeat("x", jobs.MaxNameBytes-len(s))
	}
	return out
}

// A parent at every bound at once (MaxAfter parents, args and result at
// their largest, the errors kept, names at their longest) with a full list
// of dependents still fits in a MongoDB document, with a margin of 1 MiB
// for the fields no bound covers (an error's message, the progress).
func TestDepFullListFitsInADocument(t *testing.T) {
	name := strings.Repeat("n", jobs.MaxNameBytes)
	args, err := bson.Marshal(bson.D{{Key: "a", Value: strings.Repeat("a", jobs.MaxArgsBytes-16)}})
	require.NoError(t, err)
	result, err := bson.Marshal(bson.D{{Key: "r", Value: strings.Repeat("r", jobs.MaxResultBytes-16)}})
	require.NoError(t, err)
	now := time.Now()
	j := jobs.Job{
		ID: name, Kind: name, Queue: name, Args: args, Result: result, State: jobs.StateSucceeded,
		UniqueKey: strings.Repeat("u", 1024), CreatedAt: now, UpdatedAt: now, FinishedAt: &now,
		After: longIDs(MaxAfter), WaitingOn: longIDs(MaxAfter), Dependents: true,
	}
	for i := range jobs.MaxErrors {
		j.Errors = append(j.Errors, jobs.AttemptError{Attempt: i, At: now, Owner: name, Message: strings.Repeat("e", 1024)})
	}
	doc, err := bson.Marshal(j)
	require.NoError(t, err)
	list, err := bson.Marshal(bson.D{
		{Key: dependentIdsField, Value: longIDs(maxListedDependents)},
		{Key: dependentsManyField, Value: true}, {Key: dependentsDueField, Value: true},
	})
	require.NoError(t, err)
	size := len(doc) + len(list)
	t.Logf("a parent at every bound: %d bytes, of them the list %d", size, len(list))
	require.Less(t, size, maxDocumentBytes-1<<20)
}
