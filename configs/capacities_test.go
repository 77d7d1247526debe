package configs_test

import (
	"testing"

	"github.com/docketq/docket/configs"
	"github.com/stretchr/testify/require"
)

// loadFile loads the YAML text as a worker's --config, with env.
func loadFile(t *testing.T, yaml string, env map[string]string, args ...string) (configs.Config, error) {
	t.Helper()
	return load(t, env, append([]string{"--config", writeFile(t, yaml)}, args...)...)
}

// TestCapacitiesFromConfig: queue capacities come from the file, a
// variable or a flag (each replacing the whole set, in that order); none
// set is none changed.
func TestCapacitiesFromConfig(t *testing.T) {
	c, err := load(t, nil)
	require.NoError(t, err)
	require.Nil(t, c.Client.Capacities, "no capacity unless configured")

	c, err = loadFile(t, "capacities: {}\n", nil)
	require.NoError(t, err)
	require.Nil(t, c.Client.Capacities)

	file := "capacities:\n  orders: 5\n  bulk/eu: 100000\n"
	c, err = loadFile(t, file, nil)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"orders": 5, "bulk/eu": 100000}, c.Client.Capacities)

	c, err = loadFile(t, file, map[string]string{"DOCKET_CAPACITIES": "orders=7, mail=3"})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"orders": 7, "mail": 3}, c.Client.Capacities)

	c, err = loadFile(t, file, map[string]string{"DOCKET_CAPACITIES": "orders=7"}, "--capacities", "x=1")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"x": 1}, c.Client.Capacities)
}

// TestCapacityErrorsNameTheQueue: a capacity that is not a whole number
// from 1 to queue.MaxCapacity is a config error naming the key (and its
// line, in a file).
func TestCapacityErrorsNameTheQueue(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		env  map[string]string
		want string
	}{
		{yaml: "capacities:\n  orders: -1\n", want: "capacities.orders: -1 must be from 1 to 100000"},
		{yaml: "capacities:\n  orders: 0\n", want: "capacities.orders: 0 must be from 1 to 100000 (0 would refuse every enqueue"},
		{yaml: "capacities:\n  orders: 100001\n", want: "capacities.orders: 100001 must be from 1 to 100000"},
		{yaml: "capacities:\n  orders: five\n", want: `capacities.orders: line 2: "five" is not a whole number`},
		{yaml: "capacities:\n  orders: 2.5\n", want: `capacities.orders: line 2: "2.5" is not a whole number`},
		{yaml: "capacities:\n  orders: '5'\n", want: `capacities.orders: line 2: "5" is not a whole number`},
		{yaml: "capacities:\n  orders: [5]\n", want: `capacities.orders: line 2: "[5]" is not a whole number`},
		{yaml: "capacities:\n  orders:\n", want: `capacities.orders: line 2: "" is not a whole number`},
		{yaml: "capacities:\n  orders: 1\n  orders: 2\n", want: "line 3: capacities.orders is set twice (also on line 2)"},
		{yaml: "capacities: [orders]\n", want: "capacities: line 1: must map queue names to capacities"},
		{yaml: "capacities:\n  '': 3\n", want: "capacities: a queue name is empty"},
		{env: map[string]string{"DOCKET_CAPACITIES": "orders=five"}, want: `DOCKET_CAPACITIES (capacities): "orders=five": orders: "five" is not a whole number`},
		{env: map[string]string{"DOCKET_CAPACITIES": "orders"}, want: `DOCKET_CAPACITIES (capacities): "orders": "orders" is not QUEUE=N`},
		{env: map[string]string{"DOCKET_CAPACITIES": "orders=-2"}, want: "capacities.orders: -2 must be from 1 to 100000"},
		{env: map[string]string{"DOCKET_CAPACITIES": " , "}, want: "DOCKET_CAPACITIES (capacities)"},
	} {
		_, err := loadFile(t, tc.yaml, tc.env)
		require.ErrorContains(t, err, tc.want, "%q %v", tc.yaml, tc.env)
	}
}
