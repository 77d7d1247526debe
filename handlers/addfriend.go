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
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
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
	stepAddFriendUnlink = "add-friend:unlink" // an unknown or unusable user removed from the other's friends
)

// addFriendHandler runs add-friend jobs.
//
// Both writes are $addToSet, so repeating either, or the whole job, changes
// nothing, and a job resumed after a crash between them completes the
// friendship. Before writing, the job reads both users and checks that each
// exists and that its friends field is missing or an array of strings (the
// only shapes $addToSet can extend and the other handlers can read), so an
// unknown user, or one whose document another app wrote in another shape,
// fails the job permanently, naming the user and the field, without writing
// anything.
//
// A user can still be deleted, or its friends rewritten, between that check
// and the writes. A write that matches no user, or that the server refuses
// because friends is no longer an array, means exactly that (the job reads
// the user again to tell it from a lost connection or a reply lost after the
// write applied), and the job then removes that user from the other's
// friends (the "unlink" step) before failing permanently, undoing what an
// earlier write of this job, or of a crashed or stalled attempt of it, may
// have added. The check does the same, so a retry that finds a user gone or
// unusable also cleans up after its crashed attempt. Any other error is
// returned as is: the job is retried, and the retry completes both sides.
// What the job cannot see is a user deleted or rewritten after both writes:
// keeping other users' friends in step then is the deleter's job.
type addFriendHandler struct {
	d     Deps
	users *mongo.Collection
	log   *zap.Logger
}

func registerAddFriend(reg *jobs.Registry, d Deps) error {
	h := &addFriendHandler{d: d, users: usersCollection(d.DB), log: d.logger().Named("add-friend")}
	return jobs.Register(reg, h.work, jobs.KindOptions{})
}

// setupAddFriend creates nothing: the handler reads and writes users by
// _id only.
func setupAddFriend(context.Context, *mongo.Database) error { return nil }

// friendSide is one half of a friendship: user gets friend added.
type friendSide struct {
	field, user, friend, step string
}

// userState is what the check found about one user.
type userState int

const (
	userOK       userState = iota
	userMissing            // no document
	userUnusable           // a document whose friends is of another shape
)

// sideProblem is a side whose user is missing or unusable, and why.
type sideProblem struct {
	side   friendSide
	state  userState
	reason string
}

func (h *addFriendHandler) work(ctx context.Context, job *jobs.Job, args AddFriendArgs) error {
	sides := []friendSide{
		{field: "userA", user: args.UserA, friend: args.UserB, step: stepAddFriendA},
		{field: "userB", user: args.UserB, friend: args.UserA, step: stepAddFriendB},
	}
	docs, err := h.read(ctx, args.UserA, args.UserB)
	if err != nil {
		return err
	}
	var problems []sideProblem
	for _, s := range sides {
		if state, reason := checkFriends(docs[s.user]); state != userOK {
			problems = append(problems, sideProblem{side: s, state: state, reason: reason})
		}
	}
	if len(problems) > 0 {
		return h.refuse(ctx, sides, problems, docs)
	}
	for _, s := range sides {
		res, err := h.users.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: s.user}},
			bson.D{{Key: "$addToSet", Value: bson.D{{Key: "friends", Value: s.friend}}}})
		if err != nil || res.MatchedCount == 0 {
			// Deleted or rewritten since the check, or the reply was lost:
			// read the user again to know which.
			if perr := h.recheck(ctx, sides, s, err); perr != nil {
				return perr
			}
		}
		if err := h.d.step(ctx, s.step); err != nil {
			return err
		}
	}
	h.log.Debug("friends added", job.LogFields(zap.String("user_a", args.UserA), zap.String("user_b", args.UserB))...)
	return nil
}

// read returns the documents of the users among ids that exist, by id.
// Documents are kept raw: each is checked field by field, so one written
// by another app in an unexpected shape is reported, not a decoding error.
func (h *addFriendHandler) read(ctx context.Context, ids ...string) (map[string]bson.Raw, error) {
	cur, err := h.users.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(bson.D{{Key: "friends", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("look up users %q: %w", ids, err)
	}
	defer closeCursor(ctx, cur)
	found := make(map[string]bson.Raw, len(ids))
	for cur.Next(ctx) {
		id, ok := cur.Current.Lookup("_id").StringValueOK()
		if !ok {
			continue // not one of ids, which are strings
		}
		found[id] = slices.Clone(cur.Current)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("look up users %q: %w", ids, err)
	}
	return found, nil
}

// checkFriends says whether the user document doc (nil: no user) can take
// a friend: its friends must be missing or an array of strings.
func checkFriends(doc bson.Raw) (userState, string) {
	if doc == nil {
		return userMissing, ""
	}
	v, err := doc.LookupErr("friends")
	if errors.Is(err, bsoncore.ErrElementNotFound) {
		return userOK, ""
	}
	if err != nil {
		return userUnusable, fmt.Sprintf("friends: %v", err)
	}
	arr, ok := v.ArrayOK()
	if !ok {
		return userUnusable, fmt.Sprintf("friends is %s, not an array", describeUserValue(v))
	}
	vals, err := arr.Values()
	if err != nil {
		return userUnusable, fmt.Sprintf("friends: %v", err)
	}
	for i, e := range vals {
		if e.Type != bson.TypeString {
			return userUnusable, fmt.Sprintf("friends[%d] is %s, not a string", i, describeUserValue(e))
		}
	}
	return userOK, ""
}

// recheck reads the user of side s again after its write failed with
// werr, or matched nothing (werr nil). A user now missing or unusable is
// refused as the check would have; a user who now lists the friend took
// the write (its reply was lost); otherwise recheck returns werr, to be
// retried.
func (h *addFriendHandler) recheck(ctx context.Context, sides []friendSide, s friendSide, werr error) error {
	docs, err := h.read(ctx, s.user)
	if err != nil {
		if werr == nil {
			return err
		}
		return fmt.Errorf("add %q to the friends of %q: %w (and reading the user again: %w)", s.friend, s.user, werr, err)
	}
	state, reason := checkFriends(docs[s.user])
	if state != userOK {
		return h.refuse(ctx, sides, []sideProblem{{side: s, state: state, reason: reason}}, nil)
	}
	if werr == nil {
		return fmt.Errorf("add %q to the friends of %q: matched no user, yet the user exists", s.friend, s.user)
	}
	if lists(docs[s.user], s.friend) {
		return nil
	}
	return fmt.Errorf("add %q to the friends of %q: %w", s.friend, s.user, werr)
}

// lists reports whether the user document doc has friend in its friends.
func lists(doc bson.Raw, friend string) bool {
	arr, ok := doc.Lookup("friends").ArrayOK()
	if !ok {
		return false
	}
	vals, _ := arr.Values()
	for _, v := range vals {
		if s, ok := v.StringValueOK(); ok && s == friend {
			return true
		}
	}
	return false
}

// refuse removes the missing or unusable user from the friends of the
// other user of the job, unless neither can be written, and returns the
// job's permanent error, naming each user and what is wrong. With docs, the
// users as read before any write of this attempt, the removal is skipped
// when the other user does not list the bad one: nothing to undo, and
// nothing is written.
func (h *addFriendHandler) refuse(ctx context.Context, sides []friendSide, problems []sideProblem, docs map[string]bson.Raw) error {
	msgs := make([]string, len(problems))
	unknown := false
	for i, p := range problems {
		if p.state == userMissing {
			msgs[i] = fmt.Sprintf("%s %q", p.side.field, p.side.user)
			unknown = true
		} else {
			msgs[i] = fmt.Sprintf("%s %q: %s", p.side.field, p.side.user, p.reason)
		}
	}
	var failure error
	if unknown {
		failure = jobs.Permanent(fmt.Errorf("%s: %w", strings.Join(msgs, ", "), ErrUnknownUser))
	} else {
		failure = jobs.Permanent(fmt.Errorf("%s: %w", strings.Join(msgs, ", "), ErrUnusableUser))
	}
	if len(problems) == len(sides) {
		return failure
	}
	gone, other := problems[0].side.user, problems[0].side.friend
	if docs != nil && !lists(docs[other], gone) {
		return failure
	}
	if _, err := h.users.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: other}},
		bson.D{{Key: "$pull", Value: bson.D{{Key: "friends", Value: gone}}}}); err != nil {
		return fmt.Errorf("remove user %q from the friends of %q: %w", gone, other, err)
	}
	if err := h.d.step(ctx, stepAddFriendUnlink); err != nil {
		return err
	}
	return failure
}
