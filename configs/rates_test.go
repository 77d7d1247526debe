package configs

import (
	"testing"
	"time"

	"github.com/docketq/docket/queue"
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
	_ = queue.MaxRate
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
