package docketotel_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/docketq/docket/docketotel"
	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.opentelemetry.io/otel/attribute"
)

// A job another program wrote with an id of any bytes and length runs,
// and its spans carry the id as valid UTF-8 of at most 256 bytes: an
// exporter never gets bytes it refuses, nor a megabyte per span.
func TestHostileJobIDsAreBoundedInSpans(t *testing.T) {
	t.Parallel()
	b := setup(t, docketotel.Config{})
	ids := []string{
		"not UTF-8 \xff\xfe\xc3",
		"huge " + strings.Repeat("é\x1b[2J", 2000),
	}
	for _, id := range ids {
		b.insertByHand(t, id)
	}
	b.work(t)
	n, err := b.db.Collection("jobs").CountDocuments(b.ctx, bson.D{{Key: "state", Value: jobs.StateSucceeded}})
	require.NoError(t, err)
	require.EqualValues(t, len(ids), n)

	processed := 0
	for _, s := range b.exp.GetSpans() {
		require.True(t, utf8.ValidString(s.Name), s.Name)
		for _, kv := range s.Attributes {
			if kv.Value.Type() != attribute.STRING {
				continue
			}
			v := kv.Value.AsString()
			require.True(t, utf8.ValidString(v), "%s: %q", kv.Key, v)
			require.LessOrEqual(t, len(v), 256, kv.Key)
		}
		if s.Name == "process default" {
			processed++
			id := attr(s, "messaging.message.id").AsString()
			require.True(t, strings.HasPrefix(id, "not UTF-8 \uFFFD") || strings.HasPrefix(id, "huge é\x1b[2J"), "%q", id)
		}
	}
	require.Equal(t, len(ids), processed)
}
