package store

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// The registry of live worker processes is package queue's (Beat,
// Workers); the reaper reads it to spare the jobs of live processes.

// DefaultWorkersCollection is the collection of the registry, beside the
// default jobs collection. A Store on another jobs collection C uses
// C_workers.
const DefaultWorkersCollection = "workers"

// AliveFor is how long after its last beat a process that beats every
// beatEvery (at least a second) still counts as alive.
func AliveFor(beatEvery time.Duration) time.Duration {
	return WorkerMissedBeats * max(beatEvery, time.Second)
}

// WorkerMissedBeats is how many beats a process may miss before it no
// longer counts as alive.
const WorkerMissedBeats = 3

// WorkerClockSkew (5 s) is how far past the server's time a process's lastSeen
// may be and still count as a beat. lastSeen is the server's own clock
// and the listing reads that clock too, so only another member of a
// replica set (after a failover), a clock stepped back, or another
// application's document puts it ahead. A lastSeen further ahead is
// suspicious: the process is listed with Future set, never alive, since
// such a stamp says nothing about when it last beat.
const WorkerClockSkew = 5 * time.Second

// WorkersColl is the collection of the registry.
func (s *Store) WorkersColl() *mongo.Collection {
	return s.coll.Database().Collection(s.besideJobsName(DefaultWorkersCollection), options.Collection().SetReadPreference(readpref.Primary()))
}

// ServerTime returns the server's clock, from hello's localTime; the
// local clock when the server does not say.
func (s *Store) ServerTime(ctx context.Context) time.Time {
	raw, err := s.coll.Database().RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
	if err == nil {
		if t, ok := raw.Lookup("localTime").TimeOK(); ok {
			return t.UTC()
		}
	}
	return time.Now().UTC()
}

// LastBeat reads a registry document's last beat (zero when it has none
// that reads as a time) and beat interval (zero unless positive).
func LastBeat(d bson.Raw) (lastSeen time.Time, beatEvery time.Duration) {
	if t, ok := d.Lookup("lastSeen").TimeOK(); ok {
		lastSeen = t.UTC()
	}
	if ms, ok := d.Lookup("beatEveryMs").AsInt64OK(); ok && ms > 0 {
		beatEvery = time.Duration(ms) * time.Millisecond
	}
	return lastSeen, beatEvery
}
