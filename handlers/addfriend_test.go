package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap/zaptest"
)

// usersEnv is what the add-friend and rename tests need: a database of
// their own, the queue, and a registry holding every handler, whose
// Deps.Hook calls the userStepFunc carried by the handler's context.
type usersEnv struct {
	ctx      context.Context
	db       *mongo.Database
	q        *queue.Client
	reg      *jobs.Registry
	users    *mongo.Collection
	comments *mongo.Collection
}

// userStepFunc is called by Deps.Hook after each write of a handler whose
// context carries it (see withUserSteps).
type userStepFunc func(step string) error

type userStepKey struct{}

// errUserCrash is the error of a crash injected by userCrashAt.
var errUserCrash = errors.New("injected crash")

func newUsersEnv(t *testing.T) *usersEnv {
	t.Helper()
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewDB(t)
	q, err := queue.New(db, queue.Config{})
	require.NoError(t, err)
	// Only the unique-key index matters to these tests. It is built here
	// rather than by q.EnsureIndexes, which hands the shared queue.Indexes
	// to the driver, and the driver writes to their options: a data race
	// between parallel tests.
	_, err = store.Of(q).Collection().Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "uniqueKey", Value: 1}},
		Options: options.Index().SetUnique(true).SetSparse(true),
	})
	require.NoError(t, err)
	reg := jobs.NewRegistry()
	require.NoError(t, handlers.Register(reg, handlers.Deps{
		DB:     db,
		Queue:  q,
		Logger: zaptest.NewLogger(t),
		Hook: func(ctx context.Context, step string) error {
			if f, ok := ctx.Value(userStepKey{}).(userStepFunc); ok {
				return f(step)
			}
			return nil
		},
	}))
	require.NoError(t, handlers.Setup(ctx, db))
	return &usersEnv{
		ctx:      ctx,
		db:       db,
		q:        q,
		reg:      reg,
		users:    db.Collection(handlers.UsersCollection),
		comments: db.Collection(handlers.CommentsCollection),
	}
}

// withUserSteps returns a context whose handler calls f after each write.
func withUserSteps(ctx context.Context, f userStepFunc) context.Context {
	return context.WithValue(ctx, userStepKey{}, f)
}

// userCrashAt returns a context whose handler stops with errUserCrash right after
// the write named step, as if its worker died there.
func userCrashAt(ctx context.Context, step string) context.Context {
	return withUserSteps(ctx, func(s string) error {
		if s == step {
			return fmt.Errorf("%w after %s", errUserCrash, s)
		}
		return nil
	})
}

// recordUserSteps returns a context whose handler appends each step it writes
// to the returned slice.
func recordUserSteps(ctx context.Context) (context.Context, *[]string) {
	var mu sync.Mutex
	steps := []string{}
	return withUserSteps(ctx, func(s string) error {
		mu.Lock()
		defer mu.Unlock()
		steps = append(steps, s)
		return nil
	}), &steps
}

// newUserJob returns the job Enqueue would write for args (a jobs.Args, or a
// raw document for a kind), as claimed for its first attempt. The args are
// taken as they are, unchecked, as another app's plain insert would write
// them: Enqueue itself refuses some of them (a "$gt" key, invalid UTF-8),
// and the handlers must still end such a job dead, naming what is wrong.
func newUserJob(t *testing.T, kind string, args any) *jobs.Job {
	t.Helper()
	j, err := queue.NewJob(queue.Insert{Kind: kind}, time.Now())
	require.NoError(t, err)
	raw, ok := args.(bson.Raw)
	if !ok {
		raw, err = bson.Marshal(args)
		require.NoError(t, err)
	}
	j.Args = raw
	j.State, j.Attempt = jobs.StateRunning, 1
	return j
}

// retryUserJob returns j as claimed for its next attempt.
func retryUserJob(j *jobs.Job) *jobs.Job {
	next := *j
	next.Attempt++
	return &next
}

// run runs j's registered handler directly.
func (e *usersEnv) run(ctx context.Context, t *testing.T, j *jobs.Job) error {
	t.Helper()
	h, _, ok := e.reg.Lookup(j.Kind)
	require.True(t, ok, "no handler for %q", j.Kind)
	return h.Work(ctx, j)
}

// addUsers inserts users named "name-<id>" with no friends.
func (e *usersEnv) addUsers(t *testing.T, ids ...string) {
	t.Helper()
	docs := make([]any, len(ids))
	for i, id := range ids {
		docs[i] = bson.D{{Key: "_id", Value: id}, {Key: "name", Value: "name-" + id}, {Key: "friends", Value: bson.A{}}}
	}
	_, err := e.users.InsertMany(e.ctx, docs)
	require.NoError(t, err)
}

type userDoc struct {
	ID        string     `bson:"_id"`
	Name      string     `bson:"name"`
	Friends   []string   `bson:"friends"`
	Syncing   *time.Time `bson:"syncing"`
	RenameJob string     `bson:"renameJob"`
}

func (e *usersEnv) user(t *testing.T, id string) userDoc {
	t.Helper()
	var u userDoc
	require.NoError(t, e.users.FindOne(e.ctx, bson.D{{Key: "_id", Value: id}}).Decode(&u))
	return u
}

func (e *usersEnv) allUsers(t *testing.T) []userDoc {
	t.Helper()
	cur, err := e.users.Find(e.ctx, bson.D{})
	require.NoError(t, err)
	var all []userDoc
	require.NoError(t, cur.All(e.ctx, &all))
	return all
}

// requireFriends checks every user's friends against want (missing users
// have none), duplicates included.
func (e *usersEnv) requireFriends(t *testing.T, want map[string][]string) {
	t.Helper()
	for _, u := range e.allUsers(t) {
		got := slices.Clone(u.Friends)
		slices.Sort(got)
		exp := slices.Clone(want[u.ID])
		slices.Sort(exp)
		require.Equal(t, fmt.Sprint(exp), fmt.Sprint(got), "friends of %s", u.ID)
	}
}

var addFriendSteps = []string{"add-friend:a", "add-friend:b"}

func TestAddFriend(t *testing.T) {
	e := newUsersEnv(t)
	e.addUsers(t, "u1", "u2", "u3")
	j := newUserJob(t, handlers.AddFriendKind, handlers.AddFriendArgs{UserA: "u1", UserB: "u2"})
	ctx, steps := recordUserSteps(e.ctx)
	require.NoError(t, e.run(ctx, t, j))
	require.Equal(t, addFriendSteps, *steps)
	friends := map[string][]string{"u1": {"u2"}, "u2": {"u1"}}
	e.requireFriends(t, friends)

	// A repeat, a retry and the reversed pair change nothing.
	require.NoError(t, e.run(e.ctx, t, j))
	require.NoError(t, e.run(e.ctx, t, retryUserJob(j)))
	require.NoError(t, e.run(e.ctx, t, newUserJob(t, handlers.AddFriendKind, handlers.AddFriendArgs{UserA: "u2", UserB: "u1"})))
	e.requireFriends(t, friends)

	// Another friendship adds to the lists.
	require.NoError(t, e.run(e.ctx, t, newUserJob(t, handlers.AddFriendKind, handlers.AddFriendArgs{UserA: "u3", UserB: "u1"})))
	e.requireFriends(t, map[string][]string{"u1": {"u2", "u3"}, "u2": {"u1"}, "u3": {"u1"}})
}

func TestAddFriendCrashAfterEachStep(t *testing.T) {
	t.Parallel()
	// What the users hold right after each step.
	afterStep := map[string]map[string][]string{
		"add-friend:a": {"u1": {"u2"}},
		"add-friend:b": {"u1": {"u2"}, "u2": {"u1"}},
	}
	require.Len(t, afterStep, len(addFriendSteps))
	for _, step := range addFriendSteps {
		t.Run(step, func(t *testing.T) {
			e := newUsersEnv(t)
			e.addUsers(t, "u1", "u2")
			j := newUserJob(t, handlers.AddFriendKind, handlers.AddFriendArgs{UserA: "u1", UserB: "u2"})
			err := e.run(userCrashAt(e.ctx, step), t, j)
			require.ErrorIs(t, err, errUserCrash)
			require.False(t, jobs.IsPermanent(err), "a crash must be retried")
			e.requireFriends(t, afterStep[step])

			// Recovery is the job's retry; a second retry changes nothing.
			for range 2 {
				j = retryUserJob(j)
				require.NoError(t, e.run(e.ctx, t, j))
				e.requireFriends(t, map[string][]string{"u1": {"u2"}, "u2": {"u1"}})
			}
		})
	}
}

func TestAddFriendInvalidArgs(t *testing.T) {
	e := newUsersEnv(t)
	e.addUsers(t, "u1", "u2")
	for _, tc := range []struct {
		name  string
		args  bson.D
		field string
	}{
		{"no userA", bson.D{{Key: "userB", Value: "u2"}}, "userA"},
		{"empty userA", bson.D{{Key: "userA", Value: ""}, {Key: "userB", Value: "u2"}}, "userA"},
		{"no userB", bson.D{{Key: "userA", Value: "u1"}}, "userB"},
		{"null userB", bson.D{{Key: "userA", Value: "u1"}, {Key: "userB", Value: nil}}, "userB"},
		{"number userA", bson.D{{Key: "userA", Value: 42}, {Key: "userB", Value: "u2"}}, "userA"},
		{"operator userA", bson.D{{Key: "userA", Value: bson.D{{Key: "$gt", Value: ""}}}, {Key: "userB", Value: "u2"}}, "userA"},
		{"operator userB", bson.D{{Key: "userA", Value: "u1"}, {Key: "userB", Value: bson.D{{Key: "$ne", Value: "u1"}}}}, "userB"},
		{"array userB", bson.D{{Key: "userA", Value: "u1"}, {Key: "userB", Value: bson.A{"u2"}}}, "userB"},
		{"object id userA", bson.D{{Key: "userA", Value: bson.NewObjectID()}, {Key: "userB", Value: "u2"}}, "userA"},
		{"same user twice", bson.D{{Key: "userA", Value: "u1"}, {Key: "userB", Value: "u1"}}, "userB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, steps := recordUserSteps(e.ctx)
			err := e.run(ctx, t, newUserJob(t, handlers.AddFriendKind, tc.args))
			require.Error(t, err)
			require.True(t, jobs.IsPermanent(err), "%v is not permanent", err)
			t.Log(err)
			require.Contains(t, err.Error(), "invalid args")
			require.Contains(t, err.Error(), tc.field)
			require.Empty(t, *steps)
			e.requireFriends(t, nil)
		})
	}
}

func TestAddFriendUnknownUser(t *testing.T) {
	e := newUsersEnv(t)
	e.addUsers(t, "u1")
	for _, tc := range []struct {
		name   string
		args   handlers.AddFriendArgs
		msg    string
		writes []string
	}{
		{"userB", handlers.AddFriendArgs{UserA: "u1", UserB: "ghost"}, `userB "ghost"`, []string{}},
		{"userA", handlers.AddFriendArgs{UserA: "ghost", UserB: "u1"}, `userA "ghost"`, []string{}},
		{"both", handlers.AddFriendArgs{UserA: "ghost1", UserB: "ghost2"}, `userA "ghost1", userB "ghost2"`, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, steps := recordUserSteps(e.ctx)
			err := e.run(ctx, t, newUserJob(t, handlers.AddFriendKind, tc.args))
			require.ErrorIs(t, err, handlers.ErrUnknownUser)
			require.True(t, jobs.IsPermanent(err))
			require.Contains(t, err.Error(), tc.msg)
			require.Equal(t, tc.writes, *steps)
			e.requireFriends(t, nil)
			n, err := e.users.CountDocuments(e.ctx, bson.D{})
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "a user was created")
		})
	}
}

// TestAddFriendUserDeleted deletes u2 while a job makes u1 and u2 friends:
// whenever the job notices, it fails permanently and leaves no one-sided
// friendship, whatever crashed before.
func TestAddFriendUserDeleted(t *testing.T) {
	t.Parallel()
	args := handlers.AddFriendArgs{UserA: "u1", UserB: "u2"}
	start := func(t *testing.T) (*usersEnv, *jobs.Job, func(string) error) {
		e := newUsersEnv(t)
		e.addUsers(t, "u1", "u2")
		deleteU2 := func(string) error {
			_, err := e.users.DeleteOne(e.ctx, bson.D{{Key: "_id", Value: "u2"}})
			return err
		}
		return e, newUserJob(t, handlers.AddFriendKind, args), deleteU2
	}
	requireUnknown := func(t *testing.T, e *usersEnv, err error) {
		require.ErrorIs(t, err, handlers.ErrUnknownUser)
		require.True(t, jobs.IsPermanent(err))
		require.Contains(t, err.Error(), `userB "u2"`)
		e.requireFriends(t, nil)
	}

	t.Run("between the check and the writes", func(t *testing.T) {
		e, j, deleteU2 := start(t)
		var steps []string
		err := e.run(withUserSteps(e.ctx, func(s string) error {
			steps = append(steps, s)
			if s == "add-friend:a" {
				return deleteU2(s)
			}
			return nil
		}), t, j)
		requireUnknown(t, e, err)
		require.Equal(t, []string{"add-friend:a", "add-friend:unlink"}, steps)
	})

	t.Run("crash after unlink", func(t *testing.T) {
		e, j, deleteU2 := start(t)
		err := e.run(withUserSteps(e.ctx, func(s string) error {
			switch s {
			case "add-friend:a":
				return deleteU2(s)
			case "add-friend:unlink":
				return errUserCrash
			}
			return nil
		}), t, j)
		require.ErrorIs(t, err, errUserCrash)
		e.requireFriends(t, nil)
		requireUnknown(t, e, e.run(e.ctx, t, retryUserJob(j)))
	})

	t.Run("after a crash", func(t *testing.T) {
		e, j, deleteU2 := start(t)
		require.ErrorIs(t, e.run(userCrashAt(e.ctx, "add-friend:a"), t, j), errUserCrash)
		e.requireFriends(t, map[string][]string{"u1": {"u2"}})
		require.NoError(t, deleteU2(""))
		requireUnknown(t, e, e.run(e.ctx, t, retryUserJob(j)))
	})
}

// rawUser returns the document of user id as stored.
func (e *usersEnv) rawUser(t *testing.T, id string) bson.Raw {
	t.Helper()
	raw, err := e.users.FindOne(e.ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	require.NoError(t, err)
	return raw
}

// unusableFriends are shapes of friends that another app may write and
// that add-friend cannot extend or that the other handlers cannot read.
var unusableFriends = []struct {
	name  string
	value any
	want  string // in the error
}{
	{"null", nil, "friends is null"},
	{"string", "u9", "friends is a string"},
	{"number", 42, "friends is a 32-bit integer"},
	{"double", 1.5, "friends is a double"},
	{"document", bson.D{{Key: "u9", Value: true}}, "friends is a embedded document"},
	{"array with a number", bson.A{"u9", 7}, "friends[1] is a 32-bit integer"},
	{"array with null", bson.A{nil}, "friends[0] is null"},
	{"array with a document", bson.A{bson.D{{Key: "id", Value: "u9"}}}, "friends[0] is a embedded document"},
}

// TestAddFriendUnusableUser: a user whose friends another app wrote in a
// shape add-friend cannot extend fails the job permanently, naming the
// user and the field, before any write: neither user changes.
func TestAddFriendUnusableUser(t *testing.T) {
	t.Parallel()
	for _, tc := range unusableFriends {
		for _, bad := range []string{"userA", "userB"} {
			t.Run(tc.name+"/"+bad, func(t *testing.T) {
				e := newUsersEnv(t)
				e.addUsers(t, "u1", "u2")
				badID := map[string]string{"userA": "u1", "userB": "u2"}[bad]
				_, err := e.users.UpdateOne(e.ctx, bson.D{{Key: "_id", Value: badID}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "friends", Value: tc.value}}}})
				require.NoError(t, err)
				before := map[string]bson.Raw{"u1": e.rawUser(t, "u1"), "u2": e.rawUser(t, "u2")}

				ctx, steps := recordUserSteps(e.ctx)
				err = e.run(ctx, t, newUserJob(t, handlers.AddFriendKind, handlers.AddFriendArgs{UserA: "u1", UserB: "u2"}))
				t.Log(err)
				require.ErrorIs(t, err, handlers.ErrUnusableUser)
				require.True(t, jobs.IsPermanent(err), "%v is not permanent", err)
				require.Contains(t, err.Error(), fmt.Sprintf("%s %q: %s", bad, badID, tc.want))
				require.Empty(t, *steps, "the job wrote")
				for id, doc := range before {
					require.Equal(t, doc.String(), e.rawUser(t, id).String(), "user %s changed", id)
				}
			})
		}
	}
}

// TestAddFriendUserRewritten rewrites u2's friends to null while a job
// makes u1 and u2 friends: whenever the job notices, it fails permanently
// and leaves no one-sided friendship, whatever crashed before.
func TestAddFriendUserRewritten(t *testing.T) {
	t.Parallel()
	args := handlers.AddFriendArgs{UserA: "u1", UserB: "u2"}
	start := func(t *testing.T) (*usersEnv, *jobs.Job, func() error) {
		e := newUsersEnv(t)
		e.addUsers(t, "u1", "u2")
		nullU2 := func() error {
			_, err := e.users.UpdateOne(e.ctx, bson.D{{Key: "_id", Value: "u2"}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "friends", Value: nil}}}})
			return err
		}
		return e, newUserJob(t, handlers.AddFriendKind, args), nullU2
	}
	requireRefused := func(t *testing.T, e *usersEnv, err error) {
		t.Helper()
		require.ErrorIs(t, err, handlers.ErrUnusableUser)
		require.True(t, jobs.IsPermanent(err))
		require.Contains(t, err.Error(), `userB "u2": friends is null`)
		require.Empty(t, e.user(t, "u1").Friends, "u1 lists u2 alone")
		require.Equal(t, bson.TypeNull, e.rawUser(t, "u2").Lookup("friends").Type, "u2 was written")
	}

	t.Run("between the check and the writes", func(t *testing.T) {
		e, j, nullU2 := start(t)
		var steps []string
		err := e.run(withUserSteps(e.ctx, func(s string) error {
			steps = append(steps, s)
			if s == "add-friend:a" {
				return nullU2()
			}
			return nil
		}), t, j)
		requireRefused(t, e, err)
		require.Equal(t, []string{"add-friend:a", "add-friend:unlink"}, steps)
	})

	t.Run("crash after unlink", func(t *testing.T) {
		e, j, nullU2 := start(t)
		err := e.run(withUserSteps(e.ctx, func(s string) error {
			switch s {
			case "add-friend:a":
				return nullU2()
			case "add-friend:unlink":
				return errUserCrash
			}
			return nil
		}), t, j)
		require.ErrorIs(t, err, errUserCrash)
		requireRefused(t, e, e.run(e.ctx, t, retryUserJob(j)))
	})

	t.Run("after a crash", func(t *testing.T) {
		e, j, nullU2 := start(t)
		require.ErrorIs(t, e.run(userCrashAt(e.ctx, "add-friend:a"), t, j), errUserCrash)
		e.requireFriends(t, map[string][]string{"u1": {"u2"}})
		require.NoError(t, nullU2())
		requireRefused(t, e, e.run(e.ctx, t, retryUserJob(j)))
	})
}
