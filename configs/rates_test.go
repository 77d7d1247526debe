package configs

import (
	"testing"
	"time"

	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

// decode decodes the YAML text yml as a configuration file.
func decode(yml string) (Config, error) {
	var c Config
	err := decodeFile([]byte(yml), fileSettings(&c))
	return c, err
}

func TestRatesRead(t *testing.T) {
	c, err := decode(`rates: {"kind:email": "14/s burst 5", "queue:bulk": 600/m}`)
	require.NoError(t, err)
	require.Equal(t, map[string]queue.Rate{
		"kind:email": {N: 14, Per: time.Second, Burst: 5},
		"queue:bulk": {N: 600, Per: time.Minute},
	}, c.Client.Rates)
	require.NoError(t, c.WithDefaults().Validate())
	_, err = decode("rates:\n  kind:email: 14 a second\n")
	require.ErrorContains(t, err, "rates.kind:email: line 2")
	c.Client.Rates = map[string]queue.Rate{"kinds:email": {N: 1, Per: time.Second}}
	require.ErrorContains(t, c.WithDefaults().Validate(), `rates: limit "kinds:email": a limit is named kind:KIND`)

	var v ratesValue
	require.NoError(t, v.Set("kind:email=14/s burst 5,queue:bulk=600/m"))
	require.Equal(t, "kind:email=14/s burst 5,queue:bulk=600/m", v.String())
	require.ErrorContains(t, v.Set("kind:email"), "NAME=RATE")
	require.ErrorContains(t, v.Set("kind:email=0/s"), "rates.kind:email")
}

func TestPartitionLimitsRead(t *testing.T) {
	c, err := decode(`partitionLimits: {"kind:email": "2 per customerId", "queue:bulk": 1 per tenant.id}`)
	require.NoError(t, err)
	require.Equal(t, map[string]queue.PartitionLimit{
		"kind:email": {N: 2, By: "customerId"},
		"queue:bulk": {N: 1, By: "tenant.id"},
	}, c.Client.PartitionLimits)
	require.NoError(t, c.WithDefaults().Validate())
	for yml, want := range map[string]string{
		"partitionLimits:\n  kind:email: 2 per\n":    "partitionLimits.kind:email: line 2",
		"partitionLimits:\n  kind:email: 0 per c\n":  "from 1",
		"partitionLimits:\n  kind:email: 1 per $c\n": "'$'",
	} {
		_, err = decode(yml)
		require.ErrorContains(t, err, want, yml)
	}
	c.Client.PartitionLimits = map[string]queue.PartitionLimit{"kinds:email": {N: 1, By: "c"}}
	require.ErrorContains(t, c.WithDefaults().Validate(), `partitionLimits: limit "kinds:email": a limit is named kind:KIND`)

	var v partitionsValue
	require.NoError(t, v.Set("kind:email=2 per customerId,queue:bulk=1 per tenant"))
	require.Equal(t, "kind:email=2 per customerId,queue:bulk=1 per tenant", v.String())
	require.ErrorContains(t, v.Set("kind:email"), "NAME=N per FIELD")
	require.ErrorContains(t, v.Set("kind:email=two per c"), "partitionLimits.kind:email")
}

// TestRatesRefuseMistakes: an explicit burst 0, a rate named twice (where
// the last would silently win) and a period or burst past the bounds are
// refused in the YAML file, DOCKET_RATES and --rates alike, naming the
// entry.
func TestRatesRefuseMistakes(t *testing.T) {
	for yml, want := range map[string]string{
		"rates:\n  kind:email: 2/s burst 0\n":                      "rates.kind:email: line 2: rate \"2/s burst 0\": burst 0 must be from 1",
		"rates:\n  kind:email: 2/s\n  kind:email: 3/s\n":           "line 3: rates.kind:email is set twice (also on line 2)",
		"rates:\n  kind:email: 1/9000h\n":                          "longer than",
		"rates:\n  kind:email: 1/500h burst 10000\n":               "takes 5000000h to refill",
		"partitionLimits:\n  kind:a: 1 per c\n  kind:a: 2 per c\n": "line 3: partitionLimits.kind:a is set twice",
	} {
		_, err := decode(yml)
		require.ErrorContains(t, err, want, yml)
	}
	var v ratesValue
	require.ErrorContains(t, v.Set("kind:email=2/s burst 0"), "rates.kind:email: rate \"2/s burst 0\": burst 0 must be from 1")
	require.ErrorContains(t, v.Set("kind:email=2/s, kind:email=3/s"), "rates.kind:email: the rate is named twice")
	// Long periods within the bounds are accepted.
	require.NoError(t, v.Set("kind:email=1/720h,kind:sms=1/500h burst 100"))
}
