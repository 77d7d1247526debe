package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"time"

	"github.com/docketq/docket/configs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// selectTimeout bounds how long the check waits for a server to answer.
const selectTimeout = 10 * time.Second

// server is what hello and buildInfo say about the server at a URI.
type server struct {
	SetName  string `bson:"setName"` // the replica set's name; "" outside one
	Primary  string `bson:"primary"` // the replica set's primary
	Msg      string `bson:"msg"`     // "isdbgrid" from a mongos
	Sessions *int64 `bson:"logicalSessionTimeoutMinutes"`
	Version  string `bson:"-"`
	FerretDB string `bson:"-"` // FerretDB's version when it is FerretDB (devdb)
}

// replicated reports whether writes go to a replica set: a replica set's
// member, or a mongos (whose shards are replica sets).
func (s server) replicated() bool { return s.SetName != "" || s.Msg == "isdbgrid" }

func (s server) String() string {
	name := "MongoDB " + s.Version
	if s.FerretDB != "" {
		name = "FerretDB (devdb's server)"
		if s.FerretDB != "unknown" {
			name = "FerretDB " + s.FerretDB + " (devdb's server)"
		}
	}
	switch {
	case s.Msg == "isdbgrid":
		return name + ", a sharded cluster's mongos"
	case s.SetName != "":
		return fmt.Sprintf("%s, replica set %q, primary %s", name, s.SetName, s.Primary)
	}
	return name + ", a standalone server"
}

// check connects to uri and says what it found on out; it returns an error
// when the server does not answer, is not a replica set (unless
// allowStandalone), or does not let this user create and drop a database.
func check(ctx context.Context, uri string, allowStandalone bool, out io.Writer) error {
	shown := redact(uri)
	opts := options.Client().ApplyURI(uri).SetServerSelectionTimeout(selectTimeout).SetAppName("docket-test-mongo")
	if err := opts.Validate(); err != nil {
		// The driver quotes the part of the URI it refuses, which can
		// be part of the password.
		return fmt.Errorf("%s: %s", shown, configs.Redact(err.Error(), uri))
	}
	c, err := mongo.Connect(opts)
	if err != nil {
		return fmt.Errorf("%s: %w", shown, err)
	}
	defer func() { _ = c.Disconnect(context.Background()) }()

	s, err := inspect(ctx, c)
	if err != nil {
		return fmt.Errorf("%s does not answer: %w", shown, err)
	}
	fmt.Fprintf(out, "test-mongo: %s is %s\n", shown, s)
	if !s.replicated() {
		if !allowStandalone {
			return fmt.Errorf("%s is not a replica set: it has no elections, no retryable writes and no majority to wait for, "+
				"which is what a run on real MongoDB is for (make test runs the suite on devdb). "+
				"Give a replica set's URI (mongodb://HOST/?replicaSet=NAME), or --allow-standalone to run on it anyway", shown)
		}
		fmt.Fprintln(out, "test-mongo: not a replica set; running anyway (--allow-standalone)")
	}
	fmt.Fprintf(out, "test-mongo: retryable writes: %s\n", retryWrites(opts, s))

	if err := probe(ctx, c); err != nil {
		return fmt.Errorf("%s: the suite creates a database per test and drops it, and this user cannot: %w", shown, err)
	}
	fmt.Fprintln(out, "test-mongo: a database created with a majority write and dropped: ok")
	return nil
}

// inspect asks the server what it is.
func inspect(ctx context.Context, c *mongo.Client) (server, error) {
	var s server
	admin := c.Database("admin")
	if err := admin.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&s); err != nil {
		return s, fmt.Errorf("hello: %w", err)
	}
	info, err := admin.RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Raw()
	if err != nil {
		return s, fmt.Errorf("buildInfo: %w", err)
	}
	s.Version, _ = info.Lookup("version").StringValueOK()
	s.FerretDB, _ = info.Lookup("ferretdbVersion").StringValueOK()
	return s, nil
}

// retryWrites says whether the driver will retry docket's writes.
func retryWrites(opts *options.ClientOptions, s server) string {
	switch {
	case !s.replicated() || s.Sessions == nil:
		return "none (a standalone server, or one without sessions, has none): docket's own fences only (docs/MONGODB.md)"
	case opts.RetryWrites != nil && !*opts.RetryWrites:
		return "off (retryWrites=false in the URI): docket's own fences only (docs/MONGODB.md)"
	}
	return "on (the driver retries a retryable write once; docs/MONGODB.md)"
}

// probe creates a database with a majority write and drops it, as every
// test's database is.
func probe(ctx context.Context, c *mongo.Client) error {
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	db := c.Database("docket_test_mongo_"+hex.EncodeToString(suffix[:]),
		options.Database().SetWriteConcern(writeconcern.Majority()))
	_, err := db.Collection("probe").InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
	if dropErr := db.Drop(ctx); err == nil {
		err = dropErr
	} else if dropErr != nil {
		err = errors.Join(err, dropErr)
	}
	return err
}

var (
	// userInfo runs to the last '@', whatever the scheme's letter case:
	// the URIs the driver refuses for a '/', ':' or '@' left unescaped in
	// the password are the ones an error quotes.
	userInfo       = regexp.MustCompile(`(?is)^([a-z][a-z0-9+.-]*://)?.*@`)
	secretParamVal = regexp.MustCompile(`(?i)((?:password|secret|token)[a-z]*=)[^&]*`)
)

// redact hides the credentials a URI carries, for messages.
func redact(uri string) string {
	uri = userInfo.ReplaceAllString(uri, "${1}***@")
	return secretParamVal.ReplaceAllString(uri, "${1}***")
}
