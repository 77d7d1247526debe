package docket_test

import (
	"context"
	"testing"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/testdb"
	"github.com/stretchr/testify/require"
)

// A client's Leadership is what its interface says, no more: the
// election's engine (running a second election loop, its term, its
// changes) is not reachable from an application by a type assertion.
func TestLeadershipIsNoWayIntoTheElection(t *testing.T) {
	t.Parallel()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{})
	require.NoError(t, err)
	l := c.Leadership()
	require.False(t, l.IsLeader())
	_, runs := l.(interface{ Run(context.Context) })
	require.False(t, runs, "the elector's Run is reachable through %T", l)
	_, changes := l.(interface{ Changes() <-chan struct{} })
	require.False(t, changes, "the elector's Changes is reachable through %T", l)
}
