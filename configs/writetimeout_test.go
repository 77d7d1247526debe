package configs_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/docketq/docket/configs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

func TestWriteTimeoutDefaults(t *testing.T) {
	c, err := load(t, nil)
	require.NoError(t, err)
	require.Equal(t, 10*time.Second, c.Mongo.WriteTimeout)
	require.Equal(t, 10*time.Second, *c.Mongo.ClientOptions().Timeout, "the client's operation timeout (timeoutMS)")

	// a short lease given as flags, after the defaults were applied
	c, err = load(t, nil, "--lease", "2s", "--heartbeat-interval", "300ms")
	require.NoError(t, err)
	require.Equal(t, 850*time.Millisecond, c.Mongo.WriteTimeout, "half of lease - heartbeatInterval")

	c, err = load(t, map[string]string{"DOCKET_LEASE": "5s", "DOCKET_HEARTBEAT_INTERVAL": "1s"})
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, c.Mongo.WriteTimeout)

	c, err = load(t, map[string]string{"DOCKET_WRITE_TIMEOUT": "4s"})
	require.NoError(t, err)
	require.Equal(t, 4*time.Second, c.Mongo.WriteTimeout)

	c, err = load(t, nil, "--write-timeout", "1500ms", "--lease", "3s", "--heartbeat-interval", "1s")
	require.NoError(t, err)
	require.Equal(t, 1500*time.Millisecond, c.Mongo.WriteTimeout)

	path := filepath.Join(t.TempDir(), "docket.yaml")
	require.NoError(t, os.WriteFile(path, []byte("mongo:\n  writeTimeout: 3s\n"), 0o600))
	c, err = load(t, nil, "--config", path)
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, c.Mongo.WriteTimeout)

	c = configs.Config{}.WithDefaults()
	require.Equal(t, 10*time.Second, c.Mongo.WriteTimeout)
	require.NoError(t, c.Validate())
}

func TestWriteTimeoutErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"--write-timeout", "-1s"}, "mongo.writeTimeout: -1s must be positive"},
		{map[string]string{"DOCKET_WRITE_TIMEOUT": "ten"}, nil, `DOCKET_WRITE_TIMEOUT (mongo.writeTimeout): "ten": not a duration`},
		{nil, []string{"--write-timeout", "20s"}, "mongo.writeTimeout: 20s must be shorter than worker.lease minus worker.heartbeatInterval (30s - 10s = 20s)"},
		{map[string]string{"DOCKET_WRITE_TIMEOUT": "5s"}, []string{"--lease", "4s", "--heartbeat-interval", "1s"},
			"mongo.writeTimeout: 5s must be shorter than worker.lease minus worker.heartbeatInterval (4s - 1s = 3s)"},
	} {
		_, err := load(t, tc.env, tc.args...)
		require.ErrorContains(t, err, tc.want, "%v %v", tc.env, tc.args)
	}
	c := configs.Config{}.WithDefaults()
	c.Mongo.WriteTimeout = -time.Second
	require.ErrorContains(t, c.Validate(), "mongo.writeTimeout: -1s must be positive")
}

// TestClientReadsFromPrimary: a readPreference in the URI does not reach a
// docket process's reads, which must see their own writes.
func TestClientReadsFromPrimary(t *testing.T) {
	c, err := load(t, map[string]string{"DOCKET_MONGO_URI": "mongodb://db1,db2/?replicaSet=rs0&readPreference=secondaryPreferred"})
	require.NoError(t, err)
	require.Equal(t, readpref.PrimaryMode, c.Mongo.ClientOptions().ReadPreference.Mode())
}
