package testdb

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"
)

// What the tests need to know when the shared server is a real MongoDB
// (DOCKET_TEST_MONGO_URI, as scripts/test-mongo.sh sets it) rather than a
// devdb testdb started.

// RealMongo reports whether the shared test server is the one named by
// DOCKET_TEST_MONGO_URI.
func RealMongo() bool { return os.Getenv(EnvMongoURI) != "" }

// SkipOnRealMongo skips t when the shared test server is the one named by
// DOCKET_TEST_MONGO_URI, saying why: for the tests that prove docket
// against a devdb of their own (stopped, killed, restarted, stalled) or
// measure devdb, which say nothing about that server and would build
// FerretDB for a run that does not otherwise need it. `make test` runs them.
func SkipOnRealMongo(t testing.TB, why string) {
	t.Helper()
	if RealMongo() {
		t.Skipf("devdb only, skipped with %s set: %s", EnvMongoURI, why)
	}
}

var (
	proxyOnce   sync.Once
	proxyTarget string
	proxyWhyNot string
)

// ProxyTarget returns the host:port of the shared test server for a test
// that puts a TCP proxy in front of it and connects to the proxy with
// mongodb://PROXY/?directConnection=true. On a devdb that is always
// possible. On the server named by DOCKET_TEST_MONGO_URI it is possible
// only when the URI names one host with no credentials and no TLS (which a
// plain proxy URI cannot carry) and that host is the writable primary;
// otherwise t is skipped with the reason.
func ProxyTarget(t testing.TB) string {
	t.Helper()
	uri, err := shared()
	if err != nil {
		t.Fatal(err)
	}
	if !RealMongo() {
		cs, err := connstring.Parse(uri)
		if err != nil || len(cs.Hosts) != 1 {
			t.Fatalf("testdb: devdb's URI %q does not name one host: %v", uri, err)
		}
		return cs.Hosts[0]
	}
	proxyOnce.Do(func() { proxyTarget, proxyWhyNot = directPrimary(uri) })
	if proxyWhyNot != "" {
		t.Skipf("needs a proxy in front of the server, and %s names one it cannot front: %s", EnvMongoURI, proxyWhyNot)
	}
	return proxyTarget
}

// directPrimary returns the one host of uri when a client connected
// directly to it, with no credentials or TLS, can write there; or else
// why not.
func directPrimary(uri string) (host, whyNot string) {
	cs, err := connstring.Parse(uri)
	switch {
	case err != nil:
		return "", err.Error()
	case cs.Scheme == connstring.SchemeMongoDBSRV || len(cs.Hosts) != 1:
		return "", "it names more than one host (or an SRV record): give the primary's host alone to run these tests"
	case cs.Username != "" || cs.AuthMechanism != "":
		return "", "it carries credentials, which the proxy's URI would not"
	case cs.SSL:
		return "", "it uses TLS, whose host name check a proxy fails"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + cs.Hosts[0] + "/?directConnection=true"))
	if err != nil {
		return "", err.Error()
	}
	defer func() { _ = c.Disconnect(context.Background()) }()
	var hello struct {
		IsWritablePrimary bool `bson:"isWritablePrimary"`
	}
	if err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		return "", fmt.Sprintf("hello to %s alone: %v", cs.Hosts[0], err)
	}
	if !hello.IsWritablePrimary {
		return "", fmt.Sprintf("%s is not the writable primary", cs.Hosts[0])
	}
	return cs.Hosts[0], ""
}
