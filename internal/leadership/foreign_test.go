package leadership

import (
	"context"
	"testing"
	"time"

	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestForeignLeaseOfQueryTypes: a lease document another program wrote
// whose token, version or owner is a value a filter reads as a query, not
// a value (a regex, valid or not), neither blocks the election nor
// crashes it: taking the lease must not match it by implicit equality.
func TestForeignLeaseOfQueryTypes(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]bson.D{
		"a regex token":          {{Key: "owner", Value: "x"}, {Key: "token", Value: bson.Regex{Pattern: "^t"}}, {Key: "version", Value: int64(1)}},
		"an invalid regex token": {{Key: "owner", Value: "x"}, {Key: "token", Value: bson.Regex{Pattern: "a[", Options: "i"}}, {Key: "version", Value: int64(1)}},
		"a regex owner":          {{Key: "owner", Value: bson.Regex{Pattern: "(", Options: ""}}, {Key: "version", Value: int64(1)}},
		"a regex version":        {{Key: "token", Value: "t"}, {Key: "version", Value: bson.Regex{Pattern: "[", Options: ""}}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			coll := testdb.NewDB(t).Collection(DefaultCollection)
			_, err := coll.InsertOne(context.Background(), append(bson.D{{Key: "_id", Value: DefaultName}}, doc...))
			require.NoError(t, err)
			nodes := startNodes(t, coll, 2)
			waitLeader(t, nodes, 2*testTTL+5*testInterval+time.Second, -1)
		})
	}
}
