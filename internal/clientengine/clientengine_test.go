package clientengine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

type holder struct{ Handle }

func TestPartFindsEachPartByItsType(t *testing.T) {
	type queue struct{ name string }
	type config struct{ n int }
	h := holder{NewHandle(&queue{"q"}, config{3})}
	require.Equal(t, "q", Part[*queue](h).name)
	require.Equal(t, 3, Part[config](h).n)
	require.PanicsWithValue(t, "clientengine: the client has no part of type *clientengine.config",
		func() { Part[*config](h) })
}
