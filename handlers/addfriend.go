package handlers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// A user is {_id: string, name: string, friends: [user ids]}; the
// add-friend and rename-user handlers share the collection.

// UsersCollection holds the users of the add-friend and rename-user
// handlers.
const UsersCollection = "users"

// AddFriendKind is the job kind that makes two users friends.
const AddFriendKind = "add-friend"

// ErrUnknownUser is wrapped by the permanent error of a job that names a
// user who does not exist.
var ErrUnknownUser = errors.New("user not found")

// AddFriendArgs are the args of an add-friend job: two distinct users, each
// of whom ends up in the other's friends. Ids are strings: any other BSON
// type (a number, or a document such as {"$gt": ""}) fails the job
// permanently, so an id is only ever a value, never a query operator.
type AddFriendArgs struct {
	// UserA is the _id of one user.
	UserA string `bson:"userA"`
	// UserB is the _id of the other user.
	UserB string `bson:"userB"`
}

// Kind implements jobs.Args.
func (AddFriendArgs) Kind() string { return AddFriendKind }

// Validate implements jobs.Validator.
func (a AddFriendArgs) Validate() error {
	switch {
	case a.UserA == "":
		return jobs.InvalidArgs("userA", "must not be empty")
	case a.UserB == "":
		return jobs.InvalidArgs("userB", "must not be empty")
	case a.UserA == a.UserB:
		return jobs.InvalidArgs("userB", "must differ from userA (both are %q)", a.UserA)
	}
	return nil
}

// Steps of an add-friend job, reported to Deps.Hook after each write.
const (
	stepAddFriendA      = "add-friend:a"      // userB added to userA's friends
	stepAddFriendB      = "add-friend:b"      // userA added to userB's friends
	stepAddFriendUnlink = "add-friend:unlink" // an unknown user removed from the other's friends
)

// addFriendHandler runs add-friend jobs.
//
// Both writes are $addToSet, so repeating either, or the whole job, changes
// nothing, and a job resumed after a crash between them completes the
// friendship. Before writing, the job checks that both users exist, so an
// unknown user fails it without writing anything one-sided.
//
// A user can still be deleted between that check and the writes. A write
// that matches no user means exactly that, and the job then removes the
// missing user from the other's friends (the "unlink" step) before failing
// permanently, undoing what an earlier write of this job, or of a crashed
// attempt of it, may have added. The check does the same, so a retry that
// finds a user gone also cleans up after its crashed attempt. What the job
// cannot see is a user deleted after both writes: removing a deleted user
// from everyone's friends is the deleter's job.
type addFriendHandler struct {
	d     Deps
	users *mongo.Collection
	log   *zap.Logger
}

func registerAddFriend(reg *jobs.Registry, d Deps) error {
	h := &addFriendHandler{d: d, users: d.DB.Collection(UsersCollection), log: d.logger().Named("add-friend")}
	return jobs.Register(reg, h.work, jobs.KindOptions{})
}

// setupAddFriend creates nothing: the handler reads and writes users by
// _id only.
func setupAddFriend(context.Context, *mongo.Database) error { return nil }

// friendSide is one half of a friendship: user gets friend added.
type friendSide struct {
	field, user, friend, step string
}

func (h *addFriendHandler) work(ctx context.Context, job *jobs.Job, args AddFriendArgs) error {
	sides := []friendSide{
		{field: "userA", user: args.UserA, friend: args.UserB, step: stepAddFriendA},
		{field: "userB", user: args.UserB, friend: args.UserA, step: stepAddFriendB},
	}
	var missing []friendSide
	found, err := h.existing(ctx, args.UserA, args.UserB)
	if err != nil {
		return err
	}
	for _, s := range sides {
		if !slices.Contains(found, s.user) {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		return h.unknown(ctx, sides, missing)
	}
	for _, s := range sides {
		res, err := h.users.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: s.user}},
			bson.D{{Key: "$addToSet", Value: bson.D{{Key: "friends", Value: s.friend}}}})
		if err != nil {
			return fmt.Errorf("add %q to the friends of %q: %w", s.friend, s.user, err)
		}
		if res.MatchedCount == 0 { // deleted since the check
			return h.unknown(ctx, sides, []friendSide{s})
		}
		if err := h.d.step(ctx, s.step); err != nil {
			return err
		}
	}
	h.log.Debug("friends added", job.LogFields(zap.String("user_a", args.UserA), zap.String("user_b", args.UserB))...)
	return nil
}

// existing returns which of ids are users.
func (h *addFriendHandler) existing(ctx context.Context, ids ...string) ([]string, error) {
	cur, err := h.users.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("look up users %q: %w", ids, err)
	}
	var docs []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("look up users %q: %w", ids, err)
	}
	found := make([]string, len(docs))
	for i, d := range docs {
		found[i] = d.ID
	}
	return found, nil
}

// unknown removes each missing user from the friends of the other user of
// the job, unless both are missing, and returns the job's permanent error.
func (h *addFriendHandler) unknown(ctx context.Context, sides, missing []friendSide) error {
	names := make([]string, len(missing))
	for i, m := range missing {
		names[i] = fmt.Sprintf("%s %q", m.field, m.user)
	}
	failure := jobs.Permanent(fmt.Errorf("%s: %w", strings.Join(names, ", "), ErrUnknownUser))
	if len(missing) == len(sides) {
		return failure
	}
	gone, other := missing[0].user, missing[0].friend
	if _, err := h.users.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: other}},
		bson.D{{Key: "$pull", Value: bson.D{{Key: "friends", Value: gone}}}}); err != nil {
		return fmt.Errorf("remove unknown user %q from the friends of %q: %w", gone, other, err)
	}
	if err := h.d.step(ctx, stepAddFriendUnlink); err != nil {
		return err
	}
	return failure
}
