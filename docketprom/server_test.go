package docketprom_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketq/docket/docketprom"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadyPingsOneAtATime: readiness probes that ask while a ping is under
// way share it, so a flood of requests (a web page can send many to a
// loopback port) sends the database one ping at a time, not one each.
func TestReadyPingsOneAtATime(t *testing.T) {
	var inFlight, most, pings atomic.Int64
	h := docketprom.NewHealth(func(ctx context.Context) error {
		pings.Add(1)
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(50 * time.Millisecond)
		return nil
	}, 0)
	h.SetUp()
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() { assert.NoError(t, h.Ready(context.Background())) })
	}
	wg.Wait()
	require.EqualValues(t, 1, most.Load(), "pings under way at once")
	require.Less(t, pings.Load(), int64(100), "probes asking meanwhile share a ping")
}
