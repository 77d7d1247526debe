package configs_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLimitsFromConfig: limits come from the file, DOCKET_LIMITS or
// --limits; a bad name or value stops the start with an error naming it.
func TestLimitsFromConfig(t *testing.T) {
	c, err := load(t, nil)
	require.NoError(t, err)
	require.Nil(t, c.Client.Limits, "no limit unless configured")

	c, err = loadFile(t, "limits:\n  \"kind:email\": 3\n  \"queue:bulk\": 10\n", nil)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"kind:email": 3, "queue:bulk": 10}, c.Client.Limits)

	c, err = loadFile(t, "limits:\n  \"kind:email\": 3\n", map[string]string{"DOCKET_LIMITS": "kind:push=1"}, "--limits", "kind:sms=2")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"kind:sms": 2}, c.Client.Limits, "the flag replaces the file's set")

	for yaml, want := range map[string]string{
		"limits:\n  \"kind:email\": three\n": `limits.kind:email: line 2: "three" is not a whole number`,
		"limits:\n  \"kind:email\": 0\n":     "limits.kind:email: 0 must be from 1 to 10000",
		"limits:\n  email: 3\n":              "a limit is named kind:KIND or queue:QUEUE",
	} {
		_, err := loadFile(t, yaml, nil)
		require.ErrorContains(t, err, want, yaml)
	}
}
