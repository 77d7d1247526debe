package configs_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProcessLimitsFromConfig: process limits come from the file,
// DOCKET_PROCESS_LIMITS or --process-limits (each replacing the whole
// set, in that order), reach docket.Config.ProcessLimits, and a bad name
// or value stops the start with an error naming the setting.
func TestProcessLimitsFromConfig(t *testing.T) {
	c, err := load(t, nil)
	require.NoError(t, err)
	require.Nil(t, c.Client.ProcessLimits, "no process limit unless configured")

	c, err = loadFile(t, "processLimits:\n  \"kind:resize\": 2\n  \"queue:bulk\": 4\n", nil)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"kind:resize": 2, "queue:bulk": 4}, c.Client.ProcessLimits)
	require.Nil(t, c.Client.Limits, "not a cluster-wide limit")

	c, err = loadFile(t, "processLimits:\n  \"kind:resize\": 2\n", map[string]string{"DOCKET_PROCESS_LIMITS": "kind:thumb=3"})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"kind:thumb": 3}, c.Client.ProcessLimits, "the variable replaces the file's set")

	c, err = loadFile(t, "processLimits:\n  \"kind:resize\": 2\n", map[string]string{"DOCKET_PROCESS_LIMITS": "kind:thumb=3"},
		"--process-limits", "kind:resize=1,queue:bulk=5")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"kind:resize": 1, "queue:bulk": 5}, c.Client.ProcessLimits, "the flag replaces the others")

	for yaml, want := range map[string]string{
		"processLimits:\n  \"kind:resize\": two\n": `processLimits.kind:resize: line 2: "two" is not a whole number`,
		"processLimits:\n  \"kind:resize\": 0\n":   "processLimits.kind:resize: 0 must be from 1 to 10000",
		"processLimits:\n  \"kind:resize\": -2\n":  "processLimits.kind:resize: -2 must be from 1 to 10000",
		"processLimits:\n  resize: 2\n":            "processLimits: ",
		"processLimits: [2]\n":                     `processLimits: line 1: must map limit names to limits, such as {"kind:resize": 2}`,
	} {
		_, err := loadFile(t, yaml, nil)
		require.ErrorContains(t, err, want, yaml)
	}
	for env, want := range map[string]string{
		"kind:resize=0":   "processLimits.kind:resize: 0 must be from 1",
		"kind:resize":     `DOCKET_PROCESS_LIMITS (processLimits): "kind:resize": "kind:resize" is not NAME=N`,
		"kind:resize=two": `DOCKET_PROCESS_LIMITS (processLimits): "kind:resize=two": kind:resize: "two" is not a whole number`,
		"resize=2":        "processLimits: ",
	} {
		_, err := load(t, map[string]string{"DOCKET_PROCESS_LIMITS": env})
		require.ErrorContains(t, err, want, env)
	}
	for flag, want := range map[string]string{
		"kind:resize=-1": "processLimits.kind:resize: -1 must be from 1",
		"kind:resize=x":  `invalid value "kind:resize=x" for flag -process-limits: kind:resize: "x" is not a whole number`,
	} {
		_, err := load(t, nil, "--process-limits", flag)
		require.ErrorContains(t, err, want, flag)
	}
}
