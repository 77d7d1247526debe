package handlers

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
)

// A user's name is copied into each of their comments: a comment is
// {_id, uid, uname, text, unameJob}, where uname is the name of user uid and
// unameJob the rename job that name came from (see renameHandler).
//
// On the user, a rename keeps two fields beside name:
//   - syncing: the time the name was set, present while the comments may
//     still carry an older name. The rename sweeper looks for old ones.
//   - renameJob: the id of the rename job that set the name.
//
// Names change only through rename-user jobs, which keep those fields; a
// new comment copies its author's name and renameJob (as unameJob) from one
// read of the user.

// CommentsCollection holds the comments whose author names rename-user
// jobs keep up to date.
const CommentsCollection = "comments"

// RenameKind is the job kind that renames a user and copies the new name
// into their comments.
const RenameKind = "rename-user"

// MaxUserNameLen is the longest user name a rename accepts, in characters
// (Unicode code points), not bytes.
const MaxUserNameLen = 100

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

// renameHandler runs rename-user jobs in three writes, none of which needs
// a transaction:
//
//  1. One updateOne on the user sets name, syncing (now) and renameJob (the
//     job's id).
//  2. The sync reads the user's current name, syncing and renameJob in one
//     read, then one updateMany copies that name into the user's comments.
//  3. One updateOne unsets syncing, fenced on the syncing, renameJob and
//     name that step 2 read: if a newer rename has set the user since, the
//     flag is the newer one's and stays for it (or the sweeper) to clear.
//
// Order. Job ids are UUIDv7s, which sort by the time the job was enqueued.
// Step 1 applies only while the user's renameJob is not newer than the
// job's own id, and step 2 only rewrites comments whose unameJob is older
// than the renameJob it read. So when renames race, the user and every
// comment end on the name of the last rename enqueued; a crashed rename
// retried after a newer one has finished cannot bring its older name back,
// and a slow sync that read an older name cannot overwrite a newer one in
// the comments. (Ids that break the UUIDv7 contract still converge, on the
// rename with the greatest id.)
//
// Re-runs. A re-run of the same job (a retry, or a zombie attempt whose
// lease was taken) redoes step 1 unless a newer rename has happened: the
// same name, a fresh stamp. It never needs the stamp its crashed attempt
// wrote, because a sync never clears "its own" stamp: it clears the stamp
// it read together with the name it copied, exactly as the sweeper's
// sync-only jobs do. A stamp left by a crash is therefore overwritten by
// the next step 1 or cleared by the next sync. Stamps are times, so two
// step 1s can write the same one; the fence stays exact because it also
// matches renameJob and name: one job always writes the same name, and a
// renameJob, once replaced, never comes back (see Order). If the stamp
// changed after the sync read it, step 3 matches nothing and the flag waits
// for the sync that follows the newer step 1: clearing too little is safe.
//
// A rename whose job died after step 1 leaves syncing set; the rename
// sweeper (recovery.RenameSweeper) finds it once it is older than its
// threshold and enqueues a sync-only job.
type renameHandler struct {
	d        Deps
	users    *mongo.Collection
	comments *mongo.Collection
	log      *zap.Logger
}

func registerRename(reg *jobs.Registry, d Deps) error {
	h := &renameHandler{
		d:        d,
		users:    d.DB.Collection(UsersCollection),
		comments: d.DB.Collection(CommentsCollection),
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

// rename is step 1.
func (h *renameHandler) rename(ctx context.Context, job *jobs.Job, args RenameArgs, log *zap.Logger) error {
	filter := bson.D{
		{Key: "_id", Value: args.UserID},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: "renameJob", Value: bson.D{{Key: "$exists", Value: false}}}},
			bson.D{{Key: "renameJob", Value: bson.D{{Key: "$lte", Value: job.ID}}}},
		}},
	}
	stamp := time.Now().UTC().Truncate(time.Millisecond)
	update := bson.D{{Key: "$set", Value: bson.D{
		{Key: "name", Value: args.NewName},
		{Key: "syncing", Value: stamp},
		{Key: "renameJob", Value: job.ID},
	}}}
	res, err := h.users.UpdateOne(ctx, filter, update)
	if err != nil {
		return fmt.Errorf("rename user %q: %w", args.UserID, err)
	}
	if res.MatchedCount == 0 {
		n, err := h.users.CountDocuments(ctx, bson.D{{Key: "_id", Value: args.UserID}})
		if err != nil {
			return fmt.Errorf("rename user %q: look it up: %w", args.UserID, err)
		}
		if n == 0 {
			return jobs.Permanent(fmt.Errorf("userId %q: %w", args.UserID, ErrUnknownUser))
		}
		log.Info("a newer rename has set the user's name; syncing only")
		return nil
	}
	return h.d.step(ctx, stepRenameUser)
}

// sync is steps 2 and 3, for the user's current name.
func (h *renameHandler) sync(ctx context.Context, userID string, log *zap.Logger) error {
	var u struct {
		Name      string         `bson:"name"`
		Syncing   *bson.DateTime `bson:"syncing"`
		RenameJob *string        `bson:"renameJob"`
	}
	err := h.users.FindOne(ctx, bson.D{{Key: "_id", Value: userID}},
		options.FindOne().SetProjection(bson.D{{Key: "name", Value: 1}, {Key: "syncing", Value: 1}, {Key: "renameJob", Value: 1}}),
	).Decode(&u)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return jobs.Permanent(fmt.Errorf("userId %q: %w", userID, ErrUnknownUser))
	}
	if err != nil {
		return fmt.Errorf("read user %q: %w", userID, err)
	}
	if u.Syncing == nil {
		log.Debug("user's comments are in sync")
		return nil
	}
	// Comments are versioned by the rename their name came from, so a sync
	// that read an older name cannot overwrite a newer one. renameJob is
	// absent only for a user whose syncing was set by something other than
	// a rename job: then the name is copied unversioned.
	filter := bson.D{{Key: "uid", Value: userID}}
	set := bson.D{{Key: "uname", Value: u.Name}}
	renameJob := bson.E{Key: "renameJob", Value: bson.D{{Key: "$exists", Value: false}}}
	if u.RenameJob != nil {
		renameJob.Value = *u.RenameJob
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: "unameJob", Value: bson.D{{Key: "$exists", Value: false}}}},
			bson.D{{Key: "unameJob", Value: bson.D{{Key: "$lt", Value: *u.RenameJob}}}},
		}})
		set = append(set, bson.E{Key: "unameJob", Value: *u.RenameJob})
	}
	res, err := h.comments.UpdateMany(ctx, filter, bson.D{{Key: "$set", Value: set}})
	if err != nil {
		return fmt.Errorf("copy the name of user %q into their comments: %w", userID, err)
	}
	if err := h.d.step(ctx, stepRenameComments); err != nil {
		return err
	}

	fence := bson.D{
		{Key: "_id", Value: userID},
		{Key: "syncing", Value: *u.Syncing},
		renameJob,
		{Key: "name", Value: u.Name},
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
