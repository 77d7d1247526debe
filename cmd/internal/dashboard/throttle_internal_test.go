package dashboard

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestThrottleIsBounded: past maxClients remembered, clients not yet
// remembered share one count (an attacker with many addresses is still
// throttled, and memory stays bounded); clients quiet for guessWaitMax are
// forgotten to make room.
func TestThrottleIsBounded(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	th := newThrottle(func() time.Time { return now })
	for i := range maxClients {
		th.wrong(fmt.Sprintf("10.0.%d.%d", i/256, i%256))
	}
	require.Len(t, th.clients, maxClients)
	for i := range freeGuesses {
		ok, _, _ := th.allow(fmt.Sprintf("192.0.2.%d", i))
		require.True(t, ok)
		th.wrong(fmt.Sprintf("192.0.2.%d", i))
	}
	ok, left, _ := th.allow("192.0.2.200")
	require.False(t, ok, "new clients share one count once the table is full")
	require.Equal(t, time.Second, left)
	require.Len(t, th.clients, maxClients+1)
	ok, _, _ = th.allow("10.0.0.1")
	require.True(t, ok, "a remembered client keeps its own count")

	now = now.Add(guessWaitMax + time.Second)
	th.wrong("198.51.100.1")
	require.Len(t, th.clients, 1, "the quiet ones (the shared count too) were forgotten")
	require.Equal(t, 1, th.clients["198.51.100.1"].wrong)
}
