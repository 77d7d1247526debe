package queue_test

import (
	"encoding/base64"
	"testing"

	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// typedToken is the token of the BSON value v, as JobID.Token makes it.
func typedToken(t *testing.T, v any) string {
	t.Helper()
	typ, b, err := bson.MarshalValue(v)
	require.NoError(t, err)
	return "@" + base64.RawURLEncoding.EncodeToString(append([]byte{byte(typ)}, b...))
}

// TestParseJobIDRefusesQueries: a token whose value no _id can hold and a
// filter reads as a query, not a value (a regex: a pattern; a document
// with "$" keys: operators; an array), is refused, so that a link or a
// command given one (say a parent id another app stored as a regex) never
// names, shows or deletes the jobs it happens to match.
func TestParseJobIDRefusesQueries(t *testing.T) {
	t.Parallel()
	for name, v := range map[string]any{
		"regex":        bson.Regex{Pattern: "^a"},
		"operator doc": bson.D{{Key: "$gt", Value: ""}},
		"array":        bson.A{"a1"},
	} {
		tok := typedToken(t, v)
		id, err := queue.ParseJobID(tok)
		require.ErrorIs(t, err, queue.ErrBadJobID, "%s: %s", name, tok)
		require.True(t, id.IsZero(), name)
	}
	// A document without "$" keys is an _id like any other.
	_, err := queue.ParseJobID(typedToken(t, bson.D{{Key: "a", Value: 1}}))
	require.NoError(t, err)
}
