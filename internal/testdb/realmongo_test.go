package testdb

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDirectPrimary: a proxy can front the server of a URI only when it
// names one plain host (no credentials, no TLS) that is the writable
// primary; otherwise the reason says why, for the test's skip.
func TestDirectPrimary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ uri, why string }{
		{"mongodb://h1:27017,h2:27017/?replicaSet=rs0", "more than one host"},
		{"mongodb://docket:secret@h1:27017/?replicaSet=rs0", "credentials"},
		{"mongodb://h1:27017/?tls=true", "TLS"},
	} {
		host, why := directPrimary(tc.uri)
		require.Empty(t, host, tc.uri)
		require.Contains(t, why, tc.why, tc.uri)
	}

	// The shared server (a devdb, or the writable primary the URI names):
	// its one host, as ProxyTarget gives it.
	host, why := directPrimary(URI())
	if RealMongo() && why != "" {
		t.Skipf("the rest needs a %s a proxy can front: %s", EnvMongoURI, why)
	}
	require.Empty(t, why)
	require.Equal(t, ProxyTarget(t), host)
}
