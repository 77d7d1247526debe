package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap/zaptest"
)

var renameSteps = []string{"rename:user", "rename:comments", "rename:done"}

// addComments inserts n comments by uid, carrying the user's name as it is.
func (e *usersEnv) addComments(t *testing.T, uid string, n int) {
	t.Helper()
	name := e.user(t, uid).Name
	docs := make([]any, n)
	for i := range docs {
		docs[i] = bson.D{
			{Key: "_id", Value: fmt.Sprintf("%s-c%d", uid, i)},
			{Key: "uid", Value: uid},
			{Key: "uname", Value: name},
			{Key: "text", Value: fmt.Sprintf("comment %d", i)},
		}
	}
	_, err := e.comments.InsertMany(e.ctx, docs)
	require.NoError(t, err)
}

// unames returns the author names that uid's comments carry, sorted.
func (e *usersEnv) unames(t *testing.T, uid string) []string {
	t.Helper()
	cur, err := e.comments.Find(e.ctx, bson.D{{Key: "uid", Value: uid}})
	require.NoError(t, err)
	var cs []struct {
		UName string `bson:"uname"`
	}
	require.NoError(t, cur.All(e.ctx, &cs))
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.UName
	}
	slices.Sort(out)
	return out
}

// requireSynced checks that uid is named name, has no syncing flag, and
// that all n of their comments carry name.
func (e *usersEnv) requireSynced(t *testing.T, uid, name string, n int) {
	t.Helper()
	u := e.user(t, uid)
	require.Equal(t, name, u.Name, "name of %s", uid)
	require.Nil(t, u.Syncing, "syncing flag of %s", uid)
	require.Equal(t, slices.Repeat([]string{name}, n), e.unames(t, uid), "comments of %s", uid)
}

// renameUsers gives a test u1 with 6 comments and u2 with 4.
func renameUsers(t *testing.T) *usersEnv {
	t.Helper()
	e := newUsersEnv(t)
	e.addUsers(t, "u1", "u2")
	e.addComments(t, "u1", 6)
	e.addComments(t, "u2", 4)
	return e
}

func renameJob(t *testing.T, uid, name string) *jobs.Job {
	t.Helper()
	return newUserJob(t, handlers.RenameKind, handlers.RenameArgs{UserID: uid, NewName: name})
}

func syncJob(t *testing.T, uid string) *jobs.Job {
	t.Helper()
	return newUserJob(t, handlers.RenameKind, handlers.RenameArgs{UserID: uid, Sync: true})
}

func TestRename(t *testing.T) {
	e := renameUsers(t)
	j := renameJob(t, "u1", "Ann")
	ctx, steps := recordUserSteps(e.ctx)
	require.NoError(t, e.run(ctx, t, j))
	require.Equal(t, renameSteps, *steps)
	e.requireSynced(t, "u1", "Ann", 6)
	require.Equal(t, j.ID, e.user(t, "u1").RenameJob)
	e.requireSynced(t, "u2", "name-u2", 4)

	// A repeat and a retry end in the same state, as does a sync-only job,
	// which finds nothing to do.
	require.NoError(t, e.run(e.ctx, t, j))
	require.NoError(t, e.run(e.ctx, t, retryUserJob(j)))
	ctx, steps = recordUserSteps(e.ctx)
	require.NoError(t, e.run(ctx, t, syncJob(t, "u1")))
	require.Empty(t, *steps, "a sync-only job wrote to a user in sync")
	e.requireSynced(t, "u1", "Ann", 6)
	e.requireSynced(t, "u2", "name-u2", 4)

	// The limit counts characters, not bytes: 100 "é" are 200 bytes.
	long := strings.Repeat("é", handlers.MaxUserNameLen)
	require.NoError(t, e.run(e.ctx, t, renameJob(t, "u1", long)))
	e.requireSynced(t, "u1", long, 6)
	e.requireSynced(t, "u2", "name-u2", 4)
}

func TestRenameCrashAfterEachStep(t *testing.T) {
	t.Parallel()
	for _, step := range renameSteps {
		for _, path := range []string{"retry", "sweeper"} {
			t.Run(step+"/"+path, func(t *testing.T) {
				e := renameUsers(t)
				j := renameJob(t, "u1", "Ann")
				err := e.run(userCrashAt(e.ctx, step), t, j)
				require.ErrorIs(t, err, errUserCrash)
				require.False(t, jobs.IsPermanent(err), "a crash must be retried")

				// The crash stopped the job right after step.
				u := e.user(t, "u1")
				require.Equal(t, "Ann", u.Name)
				require.Equal(t, step != "rename:done", u.Syncing != nil, "syncing flag")
				want := "Ann"
				if step == "rename:user" {
					want = "name-u1"
				}
				require.Equal(t, slices.Repeat([]string{want}, 6), e.unames(t, "u1"))

				switch path {
				case "retry":
					for range 2 {
						j = retryUserJob(j)
						require.NoError(t, e.run(e.ctx, t, j))
						e.requireSynced(t, "u1", "Ann", 6)
					}
				case "sweeper":
					sweepOnce(t, e, step != "rename:done")
					e.requireSynced(t, "u1", "Ann", 6)
				}
				e.requireSynced(t, "u2", "name-u2", 4)
			})
		}
	}
}

// sweepOnce runs a rename sweeper with a tiny threshold. When due, it
// waits for the sweeper to enqueue u1's sync job, checks that a second pass
// enqueues no other, and runs that job; otherwise it checks that the pass
// enqueues nothing.
func sweepOnce(t *testing.T, e *usersEnv, due bool) {
	t.Helper()
	sw, err := handlers.NewRenameSweeper(e.db, e.q, handlers.RenameSweeperConfig{
		Threshold: time.Millisecond,
		Logger:    zaptest.NewLogger(t),
	})
	require.NoError(t, err)
	if !due {
		n, err := sw.RunOnce(e.ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		return
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := sw.RunOnce(e.ctx)
		require.NoError(c, err)
		assert.Equal(c, 1, n)
	}, 10*time.Second, 5*time.Millisecond)
	n, err := sw.RunOnce(e.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a second sync job was enqueued while one is pending")

	j := claimUserJob(t, e)
	require.NotNil(t, j, "no sync job to claim")
	args, err := jobs.DecodeArgs[handlers.RenameArgs](j.Args)
	require.NoError(t, err)
	require.Equal(t, handlers.RenameArgs{UserID: "u1", Sync: true}, args)
	require.NoError(t, e.run(e.ctx, t, j))
	require.NoError(t, store.Of(e.q).Complete(e.ctx, store.LeaseOf(j)))
	require.Nil(t, claimUserJob(t, e), "more than one job was enqueued")

	n, err = sw.RunOnce(e.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a sync job was enqueued for a user in sync")
}

// userJobs claims the rename-user jobs.
var userJobs = store.ClaimParams{
	Owner: "test", Queues: []string{jobs.DefaultQueue}, Kinds: []string{handlers.RenameKind}, Lease: time.Minute,
}

// claimUserJob claims the next rename-user job, or returns nil.
func claimUserJob(t *testing.T, e *usersEnv) *jobs.Job {
	t.Helper()
	j, err := store.Of(e.q).Claim(e.ctx, userJobs)
	require.NoError(t, err)
	return j
}

// syncAll runs sw once, then every sync job it enqueued, and counts the
// users left syncing. It takes no t: EventuallyWithT runs it in a
// goroutine of its own.
func (e *usersEnv) syncAll(sw *handlers.RenameSweeper) (int64, error) {
	if _, err := sw.RunOnce(e.ctx); err != nil {
		return 0, err
	}
	for {
		j, err := store.Of(e.q).Claim(e.ctx, userJobs)
		if err != nil {
			return 0, err
		}
		if j == nil {
			break
		}
		h, _, ok := e.reg.Lookup(j.Kind)
		if !ok {
			return 0, fmt.Errorf("no handler for %q", j.Kind)
		}
		if err := h.Work(e.ctx, j); err != nil {
			return 0, fmt.Errorf("job %s: %w", j.ID, err)
		}
		if err := store.Of(e.q).Complete(e.ctx, store.LeaseOf(j)); err != nil {
			return 0, err
		}
	}
	return e.users.CountDocuments(e.ctx, bson.D{{Key: "syncing", Value: bson.D{{Key: "$exists", Value: true}}}})
}

// TestRenameSyncJobCrashAfterEachStep crashes the sync-only job that
// recovers a crashed rename, then retries it.
func TestRenameSyncJobCrashAfterEachStep(t *testing.T) {
	t.Parallel()
	for _, step := range renameSteps[1:] {
		t.Run(step, func(t *testing.T) {
			e := renameUsers(t)
			require.ErrorIs(t, e.run(userCrashAt(e.ctx, "rename:user"), t, renameJob(t, "u1", "Ann")), errUserCrash)
			j := syncJob(t, "u1")
			require.ErrorIs(t, e.run(userCrashAt(e.ctx, step), t, j), errUserCrash)
			require.Equal(t, step == "rename:comments", e.user(t, "u1").Syncing != nil, "syncing flag")
			require.Equal(t, slices.Repeat([]string{"Ann"}, 6), e.unames(t, "u1"))
			for range 2 {
				j = retryUserJob(j)
				require.NoError(t, e.run(e.ctx, t, j))
				e.requireSynced(t, "u1", "Ann", 6)
			}
		})
	}
}

// TestRenameOlderJobCannotRevert: renames end on the name of the job
// enqueued last, whatever order they run in and however often.
func TestRenameOlderJobCannotRevert(t *testing.T) {
	e := renameUsers(t)
	older := renameJob(t, "u1", "Old")
	crashed := renameJob(t, "u1", "Crashed")
	newer := renameJob(t, "u1", "New")
	require.Less(t, older.ID, crashed.ID)
	require.Less(t, crashed.ID, newer.ID)

	require.ErrorIs(t, e.run(userCrashAt(e.ctx, "rename:user"), t, crashed), errUserCrash)
	require.Equal(t, "Crashed", e.user(t, "u1").Name)
	require.NoError(t, e.run(e.ctx, t, newer))
	e.requireSynced(t, "u1", "New", 6)

	for _, j := range []*jobs.Job{retryUserJob(crashed), older} {
		ctx, steps := recordUserSteps(e.ctx)
		require.NoError(t, e.run(ctx, t, j))
		require.Empty(t, *steps, "an older rename wrote")
		e.requireSynced(t, "u1", "New", 6)
	}
}

func TestRenameInvalidArgs(t *testing.T) {
	e := renameUsers(t)
	for _, tc := range []struct {
		name  string
		args  bson.D
		field string
	}{
		{"no args", bson.D{}, "userId"},
		{"empty userId", bson.D{{Key: "userId", Value: ""}, {Key: "newName", Value: "x"}}, "userId"},
		{"number userId", bson.D{{Key: "userId", Value: 7}, {Key: "newName", Value: "x"}}, "userId"},
		{"operator userId", bson.D{{Key: "userId", Value: bson.D{{Key: "$gt", Value: ""}}}, {Key: "newName", Value: "x"}}, "userId"},
		{"no newName", bson.D{{Key: "userId", Value: "u1"}}, "newName"},
		{"empty newName", bson.D{{Key: "userId", Value: "u1"}, {Key: "newName", Value: ""}}, "newName"},
		{"101 characters", bson.D{{Key: "userId", Value: "u1"}, {Key: "newName", Value: strings.Repeat("é", 101)}}, "newName: 101 characters"},
		{"101 bytes", bson.D{{Key: "userId", Value: "u1"}, {Key: "newName", Value: strings.Repeat("a", 101)}}, "newName: 101 characters"},
		{"invalid UTF-8", bson.D{{Key: "userId", Value: "u1"}, {Key: "newName", Value: "\xff"}}, "newName"},
		{"number newName", bson.D{{Key: "userId", Value: "u1"}, {Key: "newName", Value: 42}}, "newName"},
		{"operator newName", bson.D{{Key: "userId", Value: "u1"}, {Key: "newName", Value: bson.D{{Key: "$set", Value: "x"}}}}, "newName"},
		{"sync with newName", bson.D{{Key: "userId", Value: "u1"}, {Key: "newName", Value: "x"}, {Key: "sync", Value: true}}, "newName"},
		{"string sync", bson.D{{Key: "userId", Value: "u1"}, {Key: "sync", Value: "yes"}}, "sync"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, steps := recordUserSteps(e.ctx)
			err := e.run(ctx, t, newUserJob(t, handlers.RenameKind, tc.args))
			require.Error(t, err)
			t.Log(err)
			require.True(t, jobs.IsPermanent(err), "%v is not permanent", err)
			require.Contains(t, err.Error(), "invalid args")
			require.Contains(t, err.Error(), tc.field)
			require.Empty(t, *steps)
			e.requireSynced(t, "u1", "name-u1", 6)
			e.requireSynced(t, "u2", "name-u2", 4)
		})
	}
}

func TestRenameUnknownUser(t *testing.T) {
	e := renameUsers(t)
	for _, j := range []*jobs.Job{renameJob(t, "ghost", "Casper"), syncJob(t, "ghost")} {
		ctx, steps := recordUserSteps(e.ctx)
		err := e.run(ctx, t, j)
		require.ErrorIs(t, err, handlers.ErrUnknownUser)
		require.True(t, jobs.IsPermanent(err))
		require.Contains(t, err.Error(), `userId "ghost"`)
		require.Empty(t, *steps)
	}
	n, err := e.users.CountDocuments(e.ctx, bson.D{})
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "a user was created")
	e.requireSynced(t, "u1", "name-u1", 6)
	e.requireSynced(t, "u2", "name-u2", 4)
}

// TestConcurrentUsersLoad runs add-friend jobs (repeats and reversed pairs
// among them) and racing renames of the same users on 8 goroutines, with
// crashes injected at random steps. Crashed add-friend jobs, and half the
// crashed renames, are retried; the other crashed renames are left to the
// sweeper. In the end friendships are symmetric and without duplicates,
// every user carries the name of the last rename enqueued for them, every
// comment carries its author's name, and no syncing flag is left.
func TestConcurrentUsersLoad(t *testing.T) {
	const (
		nUsers         = 20
		commentsPer    = 5
		nAddFriend     = 100
		renamedUsers   = 5
		renamesPerUser = 6
		workers        = 8
	)
	e := newUsersEnv(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	ids := make([]string, nUsers)
	for i := range ids {
		ids[i] = fmt.Sprintf("u%02d", i)
	}
	e.addUsers(t, ids...)
	for _, id := range ids {
		e.addComments(t, id, commentsPer)
	}

	// The plan: each job, and the step it crashes after ("" for none: a
	// step the job does not reach is no crash either).
	type planned struct {
		job     *jobs.Job
		crashAt string
		retry   bool
	}
	var plan []planned
	wantFriends := map[string][]string{}
	pool := ids[:8] // a small pool, so pairs repeat
	for range nAddFriend {
		a, b := pool[rng.IntN(len(pool))], pool[rng.IntN(len(pool))]
		for a == b {
			b = pool[rng.IntN(len(pool))]
		}
		if !slices.Contains(wantFriends[a], b) {
			wantFriends[a] = append(wantFriends[a], b)
			wantFriends[b] = append(wantFriends[b], a)
		}
		p := planned{job: newUserJob(t, handlers.AddFriendKind, handlers.AddFriendArgs{UserA: a, UserB: b}), retry: true}
		if rng.IntN(3) == 0 {
			p.crashAt = addFriendSteps[rng.IntN(len(addFriendSteps))]
		}
		plan = append(plan, p)
	}
	wantName := map[string]string{}
	for _, id := range ids {
		wantName[id] = "name-" + id
	}
	for i := range renamesPerUser {
		for _, id := range ids[:renamedUsers] {
			name := fmt.Sprintf("%s-v%d", id, i)
			p := planned{job: renameJob(t, id, name), retry: rng.IntN(2) == 0}
			wantName[id] = name // jobs made later have a later createdAt (or the same and a later id)
			if rng.IntN(3) == 0 {
				p.crashAt = renameSteps[rng.IntN(len(renameSteps))]
			}
			plan = append(plan, p)
		}
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })

	byKind := map[string]jobs.Handler{}
	for _, kind := range []string{handlers.AddFriendKind, handlers.RenameKind} {
		h, _, ok := e.reg.Lookup(kind)
		require.True(t, ok)
		byKind[kind] = h
	}
	todo := make(chan planned)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, err)
	}
	for range workers {
		wg.Go(func() {
			for p := range todo {
				ctx := e.ctx
				if p.crashAt != "" {
					ctx = userCrashAt(ctx, p.crashAt)
				}
				h := byKind[p.job.Kind]
				err := h.Work(ctx, p.job)
				if errors.Is(err, errUserCrash) && p.retry {
					err = h.Work(e.ctx, retryUserJob(p.job))
				} else if errors.Is(err, errUserCrash) {
					err = nil // left to the sweeper
				}
				if err != nil {
					fail(fmt.Errorf("%s %s: %w", p.job.Kind, p.job.Args, err))
				}
			}
		})
	}
	for _, p := range plan {
		todo <- p
	}
	close(todo)
	wg.Wait()
	require.Empty(t, failures)

	// Recovery: sweep until no user is left syncing, running each sync job
	// the sweeper enqueues.
	sw, err := handlers.NewRenameSweeper(e.db, e.q, handlers.RenameSweeperConfig{Threshold: time.Millisecond})
	require.NoError(t, err)
	var fault error // ends the wait at once; failed on below
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var syncing int64
		if syncing, fault = e.syncAll(sw); fault == nil {
			assert.Zero(c, syncing, "users left syncing")
		}
	}, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, fault)

	e.requireFriends(t, wantFriends)
	for _, u := range e.allUsers(t) {
		for _, f := range u.Friends {
			require.Contains(t, e.user(t, f).Friends, u.ID, "%s is a friend of %s, not the reverse", f, u.ID)
		}
		e.requireSynced(t, u.ID, wantName[u.ID], commentsPer)
	}
}

// TestRenameStaleSync holds a rename's sync between its read of the user
// and its write to the comments (with a command monitor on a client of its
// own), runs a newer rename meanwhile, then lets the stale sync go on.
func TestRenameStaleSync(t *testing.T) {
	t.Parallel()
	type holdKey struct{}
	start := func(t *testing.T) (e *usersEnv, older *jobs.Job, finish func() error) {
		e = renameUsers(t)
		mon := &event.CommandMonitor{Started: func(ctx context.Context, ev *event.CommandStartedEvent) {
			if hold, ok := ctx.Value(holdKey{}).(func(*event.CommandStartedEvent)); ok {
				hold(ev)
			}
		}}
		client, err := mongo.Connect(options.Client().ApplyURI(testdb.URI()).SetMonitor(mon))
		require.NoError(t, err)
		t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
		reg := jobs.NewRegistry()
		require.NoError(t, handlers.Register(reg, handlers.Deps{DB: client.Database(e.db.Name()), Queue: e.q}))
		h, _, ok := reg.Lookup(handlers.RenameKind)
		require.True(t, ok)

		older = renameJob(t, "u1", "Old")
		held, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		ctx := context.WithValue(e.ctx, holdKey{}, func(ev *event.CommandStartedEvent) {
			if ev.CommandName == "update" && ev.Command.Lookup("update").StringValue() == handlers.CommentsCollection {
				once.Do(func() {
					close(held)
					<-release
				})
			}
		})
		done := make(chan error, 1)
		go func() { done <- h.Work(ctx, older) }()
		select {
		case <-held:
		case err := <-done:
			t.Fatalf("the older rename ended before writing the comments: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("the older rename never wrote the comments")
		}
		return e, older, func() error {
			close(release)
			return <-done
		}
	}

	t.Run("newer rename finished", func(t *testing.T) {
		e, _, finish := start(t)
		require.NoError(t, e.run(e.ctx, t, renameJob(t, "u1", "New")))
		e.requireSynced(t, "u1", "New", 6)
		require.NoError(t, finish())
		e.requireSynced(t, "u1", "New", 6)
	})

	t.Run("newer rename crashed", func(t *testing.T) {
		e, _, finish := start(t)
		newer := renameJob(t, "u1", "New")
		require.ErrorIs(t, e.run(userCrashAt(e.ctx, "rename:user"), t, newer), errUserCrash)
		require.NoError(t, finish())
		u := e.user(t, "u1")
		require.Equal(t, "New", u.Name)
		require.NotNil(t, u.Syncing, "the older rename cleared the newer one's flag")
		require.NoError(t, e.run(e.ctx, t, retryUserJob(newer)))
		e.requireSynced(t, "u1", "New", 6)
	})
}

// TestRenameForeignIDThenDocket: a rename inserted by another app with a
// uuid4 id that sorts above every UUIDv7 (as the README's Python example
// makes them), then a rename enqueued later by docket: the later one wins,
// whichever runs first, and a retry of the other cannot undo it.
func TestRenameForeignIDThenDocket(t *testing.T) {
	t.Parallel()
	for _, order := range []string{"foreign first", "docket first"} {
		t.Run(order, func(t *testing.T) {
			e := renameUsers(t)
			foreign := renameJob(t, "u1", "Foreign")
			foreign.ID = "f47ac10b-58cc-4372-a567-0e02b2c3d479" // uuid4: above every UUIDv7 until 2084
			foreign.CreatedAt = time.Now().Add(-time.Second)
			docket := renameJob(t, "u1", "Docket")
			require.Greater(t, foreign.ID, docket.ID)

			first, second := foreign, docket
			if order == "docket first" {
				first, second = docket, foreign
			}
			require.NoError(t, e.run(e.ctx, t, first))
			e.requireSynced(t, "u1", first.Args.Lookup("newName").StringValue(), 6)
			require.NoError(t, e.run(e.ctx, t, second))
			e.requireSynced(t, "u1", "Docket", 6)
			require.NoError(t, e.run(e.ctx, t, retryUserJob(foreign)))
			e.requireSynced(t, "u1", "Docket", 6)
			e.requireSynced(t, "u2", "name-u2", 4)
		})
	}
}

// TestRenameCreatedAtMissingOrAhead: a rename inserted by another app
// without createdAt (the schema makes it optional), or with one in the
// future, is ordered at its first attempt, which stamps that time into the
// job: a docket rename enqueued after that attempt wins, and no later
// attempt of the first job brings its name back.
func TestRenameCreatedAtMissingOrAhead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		createdAt any // nil: missing
	}{
		{"missing", nil},
		{"an hour ahead", time.Now().Add(time.Hour)},
		{"a year ahead", time.Now().AddDate(1, 0, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := renameUsers(t)
			doc := bson.D{
				{Key: "_id", Value: "f47ac10b-58cc-4372-a567-0e02b2c3d479"}, // uuid4: above every UUIDv7
				{Key: "kind", Value: handlers.RenameKind},
				{Key: "args", Value: bson.D{{Key: "userId", Value: "u1"}, {Key: "newName", Value: "Foreign"}}},
				{Key: "state", Value: jobs.StateAvailable}, {Key: "queue", Value: jobs.DefaultQueue}, {Key: "runAt", Value: time.Now()},
			}
			if tc.createdAt != nil {
				doc = append(doc, bson.E{Key: "createdAt", Value: tc.createdAt})
			}
			_, err := store.Of(e.q).Collection().InsertOne(e.ctx, doc)
			require.NoError(t, err)

			foreign := claimUserJob(t, e)
			require.NotNil(t, foreign)
			before := time.Now()
			ctx, steps := recordUserSteps(e.ctx)
			require.NoError(t, e.run(ctx, t, foreign))
			require.Equal(t, append([]string{"rename:order"}, renameSteps...), *steps)
			e.requireSynced(t, "u1", "Foreign", 6)
			stamped, err := e.q.Get(e.ctx, foreign.ID)
			require.NoError(t, err)
			require.WithinDuration(t, before, stamped.CreatedAt, 5*time.Second, "createdAt of the foreign job")

			_, err = e.q.Enqueue(e.ctx, handlers.RenameKind, handlers.RenameArgs{UserID: "u1", NewName: "Docket"}, queue.InsertOpts{})
			require.NoError(t, err)
			docket := claimUserJob(t, e)
			require.NotNil(t, docket)
			require.NoError(t, e.run(e.ctx, t, docket))
			e.requireSynced(t, "u1", "Docket", 6)

			// The foreign job's first attempt again (stale), and a retry
			// that reads the stamp from the job: neither renames back.
			for _, j := range []*jobs.Job{foreign, retryUserJob(stamped)} {
				ctx, steps := recordUserSteps(e.ctx)
				require.NoError(t, e.run(ctx, t, j))
				require.NotContains(t, *steps, "rename:user")
				e.requireSynced(t, "u1", "Docket", 6)
			}
			again, err := e.q.Get(e.ctx, foreign.ID)
			require.NoError(t, err)
			require.Equal(t, stamped.CreatedAt, again.CreatedAt, "the stamp moved")
			e.requireSynced(t, "u2", "name-u2", 4)

			// Deleted once finished (retention, a purge, an operator): a
			// stale first attempt that stalled before its stamp cannot
			// order itself, and renames nothing (issue 20's harness).
			_, err = store.Of(e.q).Collection().DeleteOne(e.ctx, bson.D{{Key: "_id", Value: foreign.ID}})
			require.NoError(t, err)
			ctx, steps = recordUserSteps(e.ctx)
			require.ErrorIs(t, e.run(ctx, t, foreign), jobs.ErrLeaseLost)
			require.NotContains(t, *steps, "rename:user")
			e.requireSynced(t, "u1", "Docket", 6)
		})
	}
}

// TestRenameUnusableUser: a user another app wrote with a rename field of
// another type fails the job permanently, naming user and field, before
// any write.
func TestRenameUnusableUser(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  bson.D
		sync bool // the job is sync-only
		msg  string
	}{
		{"renameAt a string", bson.D{{Key: "renameAt", Value: "2026-01-01"}}, false, "renameAt is a string"},
		{"renameJob a number", bson.D{{Key: "renameAt", Value: time.Now()}, {Key: "renameJob", Value: 7}}, false, "renameJob is a 32-bit integer"},
		{"sync: name a number", bson.D{{Key: "name", Value: 42}, {Key: "syncing", Value: time.Now()}}, true, "name is a 32-bit integer"},
		{"sync: name missing", bson.D{{Key: "syncing", Value: time.Now()}}, true, "name is missing"},
		{"sync: syncing a string", bson.D{{Key: "syncing", Value: "yes"}}, true, "syncing is a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := renameUsers(t)
			update := bson.D{{Key: "$set", Value: tc.set}}
			if tc.name == "sync: name missing" {
				update = append(update, bson.E{Key: "$unset", Value: bson.D{{Key: "name", Value: ""}}})
			}
			_, err := e.users.UpdateOne(e.ctx, bson.D{{Key: "_id", Value: "u1"}}, update)
			require.NoError(t, err)
			before := e.rawUser(t, "u1").String()
			j := renameJob(t, "u1", "Ann")
			if tc.sync {
				j = syncJob(t, "u1")
			}
			ctx, steps := recordUserSteps(e.ctx)
			err = e.run(ctx, t, j)
			t.Log(err)
			require.ErrorIs(t, err, handlers.ErrUnusableUser)
			require.True(t, jobs.IsPermanent(err))
			require.Contains(t, err.Error(), `userId "u1": `+tc.msg)
			require.Empty(t, *steps)
			require.Equal(t, before, e.rawUser(t, "u1").String())
			e.requireSynced(t, "u2", "name-u2", 4)
		})
	}
}

// TestRenameForeignComments: comments another app wrote with a unameAt or
// unameJob of another type are synced like older ones; comments whose uid
// is not a string are nobody's and are left alone.
func TestRenameForeignComments(t *testing.T) {
	e := renameUsers(t)
	_, err := e.comments.InsertMany(e.ctx, []any{
		bson.D{{Key: "_id", Value: "odd-at"}, {Key: "uid", Value: "u1"}, {Key: "uname", Value: "x"}, {Key: "unameAt", Value: "yesterday"}},
		bson.D{{Key: "_id", Value: "odd-job"}, {Key: "uid", Value: "u1"}, {Key: "uname", Value: "x"}, {Key: "unameAt", Value: time.Now()}, {Key: "unameJob", Value: 3}},
		bson.D{{Key: "_id", Value: "odd-uid"}, {Key: "uid", Value: 1}, {Key: "uname", Value: "x"}},
	})
	require.NoError(t, err)
	require.NoError(t, e.run(e.ctx, t, renameJob(t, "u1", "Ann")))
	e.requireSynced(t, "u1", "Ann", 8)
	var odd struct {
		UName string `bson:"uname"`
	}
	require.NoError(t, e.comments.FindOne(e.ctx, bson.D{{Key: "_id", Value: "odd-uid"}}).Decode(&odd))
	require.Equal(t, "x", odd.UName)
}
