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
