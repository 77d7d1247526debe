package handlers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.uber.org/zap"
)

// A user's name is copied into each of their comments: a comment is
// {_id, uid, uname, text, unameAt, unameJob}, where uname is the name of
// user uid and unameAt and unameJob the order key of the rename that name
// came from (see renameHandler).
//
// On the user, a rename keeps three fields beside name:
//   - syncing: the time the name was set, present while the comments may
//     still carry an older name. The rename sweeper looks for old ones.
//   - renameAt: the createdAt of the rename job that set the name: the
//     time docket's enqueue stamped on it (or, for a job inserted without
//     one, the time of its first attempt; see renameHandler).
//   - renameJob: the id of that job, which breaks ties between renames
//     enqueued in the same millisecond.
//
// Names change only through rename-user jobs, which keep those fields; a
// new comment copies its author's name, renameAt and renameJob (as unameAt
// and unameJob) from one read of the user.

// CommentsCollection holds the comments whose author names rename-user
// jobs keep up to date.
const CommentsCollection = "comments"

// RenameKind is the job kind that renames a user and copies the new name
// into their comments.
const RenameKind = "rename-user"

// MaxUserNameLen is the longest user name a rename accepts, in characters
// (Unicode code points), not bytes.
const MaxUserNameLen = 100

// RenameMaxFutureSkew is how far in the future (by the worker's clock) a
// rename job's createdAt may be when the job first runs. A rename is
// ordered by its createdAt, so one stamped in the future would win over
// every rename enqueued before that time: a createdAt further ahead than
// this, like a missing one, is replaced by the time of the job's first
// attempt (see renameHandler). It is the clock skew between enqueuers and
// workers that docket takes at its word.
const RenameMaxFutureSkew = time.Second

// RenameArgs are the args of a rename-user job. There are two forms:
//
//   - {userId, newName}: a rename. It sets the user's name and then copies
//     the user's current name into all their comments.
//   - {userId, sync: true}: sync only, with no newName. It copies the
//     user's current name into their comments if a rename left them
//     unsynced (the user has a syncing flag) and does nothing otherwise.
//     The rename sweeper enqueues these for renames that crashed.
//
// A sync flag is explicit rather than implied by an empty newName, so a
// rename whose name was lost on the way still fails as invalid instead of
// quietly doing something else.
type RenameArgs struct {
	// UserID is the _id of the user.
	UserID string `bson:"userId"`
	// NewName is the user's new name: 1 to MaxUserNameLen characters of
	// valid UTF-8. It must be empty when Sync is set.
	NewName string `bson:"newName,omitempty"`
	// Sync makes the job sync only.
	Sync bool `bson:"sync,omitempty"`
}

// Kind implements jobs.Args.
func (RenameArgs) Kind() string { return RenameKind }

// Validate implements jobs.Validator.
func (a RenameArgs) Validate() error {
	if a.UserID == "" {
		return jobs.InvalidArgs("userId", "must not be empty")
	}
	if a.Sync {
		if a.NewName != "" {
			return jobs.InvalidArgs("newName", "must be empty in a sync-only job (sync is true)")
		}
		return nil
	}
	switch n := utf8.RuneCountInString(a.NewName); {
	case a.NewName == "":
		return jobs.InvalidArgs("newName", "must not be empty (or set sync: true for a sync-only job)")
	case !utf8.ValidString(a.NewName):
		return jobs.InvalidArgs("newName", "must be valid UTF-8")
	case n > MaxUserNameLen:
		return jobs.InvalidArgs("newName", "%d characters is over the limit of %d", n, MaxUserNameLen)
	}
	return nil
}

// RenameSyncUniqueKey is the unique key of the sync-only job for userID: at
// most one is unfinished per user.
func RenameSyncUniqueKey(userID string) string { return "rename-sync:" + userID }

// Steps of a rename-user job, reported to Deps.Hook after each write. A
// sync-only job writes only the last two.
const (
	stepRenameUser     = "rename:user"     // name, syncing and renameJob set on the user
	stepRenameComments = "rename:comments" // the user's name copied into their comments
	stepRenameDone     = "rename:done"     // syncing unset
)

// renameHandler runs rename-user jobs in three writes (four for a job
// without a usable createdAt, see Order), none of which needs a
// transaction:
//
//  1. One updateOne on the user sets name, syncing (now), renameAt (the
//     job's createdAt) and renameJob (the job's id).
//  2. The sync reads the user's current name, syncing, renameAt and
//     renameJob in one read, then one updateMany copies that name into the
//     user's comments.
//  3. One updateOne unsets syncing, fenced on the syncing, renameAt,
//     renameJob and name that step 2 read: if a newer rename has set the
//     user since, the flag is the newer one's and stays for it (or the
//     sweeper) to clear.
//
// Order. A rename's order key is (createdAt, _id) of its job: createdAt is
// the time the job was enqueued, which docket's Enqueue stamps and which
// the documented schema asks other apps to stamp; the id only breaks ties.
// Ids alone do not order renames: an app that inserts jobs itself chooses
// them (a uuid4 sorts above every later UUIDv7, forever). A job inserted
// without createdAt (the schema makes it optional), or with one more than
// RenameMaxFutureSkew ahead of the worker's clock, is ordered at its first
// attempt instead: that attempt writes its own time into the job's
// createdAt ($min, fenced on its lease token, the "rename:order" step) and
// reads it back, and every later attempt finds it there. Step 1 applies
// only while the user's (renameAt, renameJob) is not newer than the job's
// key, and step 2 only rewrites comments whose (unameAt, unameJob) is older
// than the key it read with the name (or of another shape: written by
// another app). So when renames race, the user
// and every comment end on the name of the rename enqueued last; a crashed
// rename retried after a newer one has finished cannot bring its older
// name back, and a slow sync that read an older name cannot overwrite a
// newer one in the comments.
//
// Foreign documents. Before its first write the job reads the user and
// checks the fields it compares or copies: renameAt a date, renameJob a
// string, and for the sync name a string and syncing a date (each may be
// missing). A user of another shape fails the job permanently, naming the
// user and the field, with nothing written.
//
// Re-runs. A re-run of the same job (a retry, or a zombie attempt whose
// lease was taken) redoes step 1 unless a newer rename has happened: the
// same name, a fresh stamp. It never needs the stamp its crashed attempt
// wrote, because a sync never clears "its own" stamp: it clears the stamp
// it read together with the name it copied, exactly as the sweeper's
// sync-only jobs do. A stamp left by a crash is therefore overwritten by
// the next step 1 or cleared by the next sync. Stamps are times, so two
// step 1s can write the same one; the fence stays exact because it also
// matches the order key and name: one job always writes the same name, and
// an order key, once replaced, never comes back (see Order). If the stamp
// changed after the sync read it, step 3 matches nothing and the flag waits
// for the sync that follows the newer step 1: clearing too little is safe.
//
// A rename whose job died after step 1 leaves syncing set; the rename
// sweeper (RenameSweeper, renamesweeper.go) finds it once it is older than its
// threshold and enqueues a sync-only job.
type renameHandler struct {
	d        Deps
	jobs     *mongo.Collection
	users    *mongo.Collection
	comments *mongo.Collection
	log      *zap.Logger
}

func registerRename(reg *jobs.Registry, d Deps) error {
	h := &renameHandler{
		d:        d,
		jobs:     d.DB.Collection(d.Queue.CollectionName(), options.Collection().SetReadPreference(readpref.Primary())),
		users:    usersCollection(d.DB),
		comments: commentsCollection(d.DB),
		log:      d.logger().Named("rename"),
	}
	return jobs.Register(reg, h.work, jobs.KindOptions{})
}

// setupRename creates the indexes of the sweeper's query (users.syncing,
// sparse as only users being synced have it) and of step 2 (comments.uid).
func setupRename(ctx context.Context, db *mongo.Database) error {
	err := queue.EnsureIndexes(ctx, db.Collection(UsersCollection), []mongo.IndexModel{{
		Keys:    bson.D{{Key: "syncing", Value: 1}},
		Options: options.Index().SetName("syncing").SetSparse(true),
	}})
	if err != nil {
		return fmt.Errorf("handlers: create index on %s: %w", UsersCollection, err)
	}
	err = queue.EnsureIndexes(ctx, db.Collection(CommentsCollection), []mongo.IndexModel{{
		Keys:    bson.D{{Key: "uid", Value: 1}},
		Options: options.Index().SetName("uid"),
	}})
	if err != nil {
		return fmt.Errorf("handlers: create index on %s: %w", CommentsCollection, err)
	}
	return nil
}

func (h *renameHandler) work(ctx context.Context, job *jobs.Job, args RenameArgs) error {
	log := h.log.With(job.LogFields(zap.String("user_id", args.UserID))...)
	if !args.Sync {
		if err := h.rename(ctx, job, args, log); err != nil {
			return err
		}
	}
	return h.sync(ctx, args.UserID, log)
}

// renameKey is the order key of a rename: its job's createdAt, then id.
type renameKey struct {
	at  bson.DateTime
	job string
}

// stepRenameOrder is the write that stamps the first attempt's time on a
// rename job without a usable createdAt.
const stepRenameOrder = "rename:order"

// order returns the order key of rename job j. A createdAt that is missing
// or more than RenameMaxFutureSkew ahead of now is replaced, in the job
// document, by the time of the first attempt that sees it: $min sets a
// missing field and lowers a future one, and once lowered it is never
// raised, so every attempt, stale or not, reads back the same key.
func (h *renameHandler) order(ctx context.Context, j *jobs.Job, now time.Time) (renameKey, error) {
	if !j.CreatedAt.IsZero() && !j.CreatedAt.After(now.Add(RenameMaxFutureSkew)) {
		return renameKey{at: bson.NewDateTimeFromTime(j.CreatedAt), job: j.ID}, nil
	}
	fence := bson.D{{Key: "_id", Value: j.ID}, {Key: "state", Value: jobs.StateRunning}, {Key: "leaseToken", Value: j.LeaseToken}}
	if _, err := h.jobs.UpdateOne(ctx, fence, bson.D{{Key: "$min", Value: bson.D{{Key: "createdAt", Value: now}}}}); err != nil {
		return renameKey{}, fmt.Errorf("stamp rename job %s with its first attempt's time: %w", j.ID, err)
	}
	if err := h.d.step(ctx, stepRenameOrder); err != nil {
		return renameKey{}, err
	}
	raw, err := h.jobs.FindOne(ctx, bson.D{{Key: "_id", Value: j.ID}},
		options.FindOne().SetProjection(bson.D{{Key: "createdAt", Value: 1}})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		// Gone: deleted (by retention, a purge, an operator) after another
		// attempt finished it, while this one was stalled. Its own time
		// would order it after every rename enqueued meanwhile: it must
		// not rename.
		return renameKey{}, fmt.Errorf("rename job %s: no longer in the jobs collection, so its order is unknown: %w", j.ID, jobs.ErrLeaseLost)
	}
	if err != nil {
		return renameKey{}, fmt.Errorf("read back the createdAt of rename job %s: %w", j.ID, err)
	}
	at, ok := raw.Lookup("createdAt").TimeOK()
	if !ok || at.After(now.Add(RenameMaxFutureSkew)) {
		// The stamp did not apply: this attempt lost its lease before it.
		return renameKey{}, fmt.Errorf("rename job %s: createdAt still unusable (%s) after stamping it: %w",
			j.ID, describeUserValue(raw.Lookup("createdAt")), jobs.ErrLeaseLost)
	}
	return renameKey{at: bson.NewDateTimeFromTime(at), job: j.ID}, nil
}

// renameUser is what a rename read of a user: the fields it compares or
// copies, as stored. Pointers are nil for missing fields.
type renameUser struct {
	name      *string
	syncing   *bson.DateTime
	renameAt  *bson.DateTime
	renameJob *string
}

// readUser reads the rename fields of user id and checks their shapes:
// renameAt a date and renameJob a string, and with forSync also name a
// string and syncing a date, each possibly missing (name only without
// forSync). A user of another shape is the permanent ErrUnusableUser error
// naming the user and the field; no user is the permanent ErrUnknownUser.
func (h *renameHandler) readUser(ctx context.Context, id string, forSync bool) (renameUser, error) {
	raw, err := h.users.FindOne(ctx, bson.D{{Key: "_id", Value: id}},
		options.FindOne().SetProjection(bson.D{
			{Key: "name", Value: 1}, {Key: "syncing", Value: 1}, {Key: "renameAt", Value: 1}, {Key: "renameJob", Value: 1},
		})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return renameUser{}, jobs.Permanent(fmt.Errorf("userId %q: %w", id, ErrUnknownUser))
	}
	if err != nil {
		return renameUser{}, fmt.Errorf("read user %q: %w", id, err)
	}
	var u renameUser
	var problems []string
	str := func(field string, dst **string) {
		v, err := raw.LookupErr(field)
		if err != nil {
			return // missing
		}
		if s, ok := v.StringValueOK(); ok {
			*dst = &s
			return
		}
		problems = append(problems, fmt.Sprintf("%s is %s, not a string", field, describeUserValue(v)))
	}
	date := func(field string, dst **bson.DateTime) {
		v, err := raw.LookupErr(field)
		if err != nil {
			return
		}
		if d, ok := v.DateTimeOK(); ok {
			dt := bson.DateTime(d)
			*dst = &dt
			return
		}
		problems = append(problems, fmt.Sprintf("%s is %s, not a date", field, describeUserValue(v)))
	}
	if forSync {
		str("name", &u.name)
		date("syncing", &u.syncing)
	}
	date("renameAt", &u.renameAt)
	str("renameJob", &u.renameJob)
	if len(problems) > 0 {
		return u, jobs.Permanent(fmt.Errorf("userId %q: %s: %w", id, strings.Join(problems, "; "), ErrUnusableUser))
	}
	if forSync && u.syncing != nil && u.name == nil {
		return u, jobs.Permanent(fmt.Errorf("userId %q: name is missing, with a rename to sync: %w", id, ErrUnusableUser))
	}
	return u, nil
}

// rename is step 1.
func (h *renameHandler) rename(ctx context.Context, job *jobs.Job, args RenameArgs, log *zap.Logger) error {
	stamp := time.Now().UTC().Truncate(time.Millisecond)
	key, err := h.order(ctx, job, stamp)
	if err != nil {
		return err
	}
	if _, err := h.readUser(ctx, args.UserID, false); err != nil {
		return err
	}
	// The user's key is not newer than the job's: (renameAt, renameJob) <=
	// (key.at, key.job), a missing field sorting first.
	filter := bson.D{
		{Key: "_id", Value: args.UserID},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: "renameAt", Value: bson.D{{Key: "$exists", Value: false}}}},
			bson.D{{Key: "renameAt", Value: bson.D{{Key: "$lt", Value: key.at}}}},
			bson.D{{Key: "renameAt", Value: key.at}, {Key: "renameJob", Value: bson.D{{Key: "$lte", Value: key.job}}}},
			bson.D{{Key: "renameAt", Value: key.at}, {Key: "renameJob", Value: bson.D{{Key: "$exists", Value: false}}}},
		}},
	}
	update := bson.D{{Key: "$set", Value: bson.D{
		{Key: "name", Value: args.NewName},
		{Key: "syncing", Value: stamp},
		{Key: "renameAt", Value: key.at},
		{Key: "renameJob", Value: key.job},
	}}}
	res, err := h.users.UpdateOne(ctx, filter, update)
	if err != nil {
		return fmt.Errorf("rename user %q: %w", args.UserID, err)
	}
	if res.MatchedCount == 0 {
		// Deleted, rewritten by another app, or renamed by a newer job
		// since the read: read again to know which.
		u, err := h.readUser(ctx, args.UserID, false)
		if err != nil {
			return err
		}
		log.Info("a newer rename has set the user's name; syncing only",
			zap.Timep("user_rename_at", dateTimep(u.renameAt)), zap.Stringp("user_rename_job", u.renameJob))
		return nil
	}
	return h.d.step(ctx, stepRenameUser)
}

func dateTimep(d *bson.DateTime) *time.Time {
	if d == nil {
		return nil
	}
	t := d.Time().UTC()
	return &t
}

// orMissing is v as a filter value, or {$exists: false} when v is nil.
func orMissing[T any](v *T) any {
	if v == nil {
		return bson.D{{Key: "$exists", Value: false}}
	}
	return *v
}

// sync is steps 2 and 3, for the user's current name.
func (h *renameHandler) sync(ctx context.Context, userID string, log *zap.Logger) error {
	u, err := h.readUser(ctx, userID, true)
	if err != nil {
		return err
	}
	if u.syncing == nil {
		log.Debug("user's comments are in sync")
		return nil
	}
	// Comments are versioned by the order key of the rename their name
	// came from, so a sync that read an older name cannot overwrite a newer
	// one; a comment whose unameAt is missing or not a date is older than
	// any rename. renameAt is absent only for a user whose syncing was set
	// by something other than a rename job of this version: then the name
	// is copied into the unversioned comments only.
	filter := bson.D{{Key: "uid", Value: userID}}
	set := bson.D{{Key: "uname", Value: *u.name}}
	var unset bson.D
	notDate := bson.D{{Key: "unameAt", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$type", Value: "date"}}}}}}
	if u.renameAt != nil {
		older := bson.A{
			notDate,
			bson.D{{Key: "unameAt", Value: bson.D{{Key: "$lt", Value: *u.renameAt}}}},
			bson.D{{Key: "unameAt", Value: *u.renameAt}, {Key: "unameJob", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$type", Value: "string"}}}}}},
		}
		set = append(set, bson.E{Key: "unameAt", Value: *u.renameAt})
		if u.renameJob != nil {
			older = append(older, bson.D{{Key: "unameAt", Value: *u.renameAt}, {Key: "unameJob", Value: bson.D{{Key: "$lt", Value: *u.renameJob}}}})
			set = append(set, bson.E{Key: "unameJob", Value: *u.renameJob})
		} else {
			unset = bson.D{{Key: "unameJob", Value: ""}}
		}
		filter = append(filter, bson.E{Key: "$or", Value: older})
	} else {
		filter = append(filter, notDate...)
	}
	update := bson.D{{Key: "$set", Value: set}}
	if unset != nil {
		update = append(update, bson.E{Key: "$unset", Value: unset})
	}
	res, err := h.comments.UpdateMany(ctx, filter, update)
	if err != nil {
		return fmt.Errorf("copy the name of user %q into their comments: %w", userID, err)
	}
	if err := h.d.step(ctx, stepRenameComments); err != nil {
		return err
	}

	fence := bson.D{
		{Key: "_id", Value: userID},
		{Key: "syncing", Value: *u.syncing},
		{Key: "renameAt", Value: orMissing(u.renameAt)},
		{Key: "renameJob", Value: orMissing(u.renameJob)},
		{Key: "name", Value: *u.name},
	}
	done, err := h.users.UpdateOne(ctx, fence, bson.D{{Key: "$unset", Value: bson.D{{Key: "syncing", Value: ""}}}})
	if err != nil {
		return fmt.Errorf("unset syncing of user %q: %w", userID, err)
	}
	if err := h.d.step(ctx, stepRenameDone); err != nil {
		return err
	}
	log.Debug("user's name copied into their comments",
		zap.Int64("comments", res.ModifiedCount), zap.Bool("flag_cleared", done.ModifiedCount > 0))
	return nil
}
