package configs_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLeaseHeartbeatAndGraceAreValidatedTogether: issue 15 #5. The lease
// and the heartbeat interval are checked against each other at start, with
// a message naming the settings; any non-negative reaper grace goes with
// them (every write is fenced: the grace only moves when stealing starts,
// past lease − heartbeatInterval + grace of clock skew).
func TestLeaseHeartbeatAndGraceAreValidatedTogether(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lease", "2s", "--heartbeat-interval", "1s"},
			"worker.heartbeatInterval: 1s must be at most a third of worker.lease (2s / 3 = 666.666666ms)"},
		{[]string{"--lease", "20s"}, "worker.heartbeatInterval: 10s must be at most a third of worker.lease (20s"},
		{[]string{"--lease", "3s", "--heartbeat-interval", "1s", "--reap-grace", "-1ms"}, "reaper.grace: -1ms must not be negative"},
		{[]string{"--lease", "3s", "--heartbeat-interval", "1s"}, ""}, // a third exactly, the default 5s grace
		{[]string{"--lease", "3s", "--heartbeat-interval", "1s", "--reap-grace", "1m"}, ""},
		{[]string{"--lease", "2s", "--heartbeat-interval", "500ms", "--reap-grace", "1ms"}, ""}, // the chaos run's
		{nil, ""}, // the defaults: 30s, 10s, 5s
	} {
		_, err := load(t, nil, tc.args...)
		if tc.want == "" {
			require.NoError(t, err, "%v", tc.args)
			continue
		}
		require.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
}
