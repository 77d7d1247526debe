package configs

import (
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

func TestRatesRead(t *testing.T) {
	var c struct {
		Rates Rates `yaml:"rates"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(`rates: {"kind:email": "14/s burst 5", "queue:bulk": 600/m}`), &c))
	require.Equal(t, Rates{
		"kind:email": {N: 14, Per: time.Second, Burst: 5},
		"queue:bulk": {N: 600, Per: time.Minute},
	}, c.Rates)
	require.NoError(t, c.Rates.Validate())

	err := yaml.Unmarshal([]byte("rates:\n  kind:email: 14 a second\n"), &c)
	require.ErrorContains(t, err, "rates.kind:email: line 2")
	require.ErrorContains(t, Rates{"kinds:email": {N: 1, Per: time.Second}}.Validate(), "kind:KIND")

	var v ratesValue
	require.NoError(t, v.Set("kind:email=14/s burst 5,queue:bulk=600/m"))
	require.Equal(t, "kind:email=14/s burst 5,queue:bulk=600/m", v.String())
	require.ErrorContains(t, v.Set("kind:email"), "NAME=RATE")
	require.ErrorContains(t, v.Set("kind:email=0/s"), "rates.kind:email")
	_ = store.MaxRate
}

func TestPartitionLimitsRead(t *testing.T) {
	var c struct {
		P PartitionLimits `yaml:"partitionLimits"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(`partitionLimits: {"kind:email": "2 per customerId", "queue:bulk": 1 per tenant.id}`), &c))
	require.Equal(t, PartitionLimits{
		"kind:email": {N: 2, By: "customerId"},
		"queue:bulk": {N: 1, By: "tenant.id"},
	}, c.P)
	require.NoError(t, c.P.Validate())

	err := yaml.Unmarshal([]byte("partitionLimits:\n  kind:email: 2 per\n"), &c)
	require.ErrorContains(t, err, "partitionLimits.kind:email: line 2")
	require.ErrorContains(t, yaml.Unmarshal([]byte("partitionLimits:\n  kind:email: 0 per c\n"), &c), "from 1")
	require.ErrorContains(t, yaml.Unmarshal([]byte("partitionLimits:\n  kind:email: 1 per $c\n"), &c), "'$'")
	require.ErrorContains(t, PartitionLimits{"kinds:email": {N: 1, By: "c"}}.Validate(), "kind:KIND")

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
	var c struct {
		Rates Rates `yaml:"rates"`
	}
	for yml, want := range map[string]string{
		"rates:\n  kind:email: 2/s burst 0\n":                      "rates.kind:email: line 2: rate \"2/s burst 0\": burst 0 must be from 1",
		"rates:\n  kind:email: 2/s\n  kind:email: 3/s\n":           "rates.kind:email: line 3: the rate is named twice",
		"rates:\n  kind:email: 1/9000h\n":                          "longer than",
		"rates:\n  kind:email: 1/500h burst 10000\n":               "takes 5000000h to refill",
		"partitionLimits:\n  kind:a: 1 per c\n  kind:a: 2 per c\n": "",
	} {
		if want == "" {
			var p struct {
				P PartitionLimits `yaml:"partitionLimits"`
			}
			require.ErrorContains(t, yaml.Unmarshal([]byte(yml), &p), "named twice", yml)
			continue
		}
		require.ErrorContains(t, yaml.Unmarshal([]byte(yml), &c), want, yml)
	}
	var v ratesValue
	require.ErrorContains(t, v.Set("kind:email=2/s burst 0"), "rates.kind:email: rate \"2/s burst 0\": burst 0 must be from 1")
	require.ErrorContains(t, v.Set("kind:email=2/s, kind:email=3/s"), "rates.kind:email: the rate is named twice")
	// Long periods within the bounds are accepted.
	require.NoError(t, v.Set("kind:email=1/720h,kind:sms=1/500h burst 100"))
}
