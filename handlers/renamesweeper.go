package handlers

import (
	"context"
	"fmt"
	"time"

	"github.com/docketq/docket/queue"
	"github.com/docketq/docket/recovery"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.uber.org/zap"
)

// Defaults for RenameSweeperConfig.
const (
	// DefaultRenameSweepSchedule is how often the sweeper runs.
	DefaultRenameSweepSchedule = "@every 30s"
	// DefaultRenameSweepThreshold is how long a user may keep a syncing
	// flag before the sweeper gives them a sync job.
	DefaultRenameSweepThreshold = time.Minute
	// DefaultRenameSweepBatch is how many users one query of a pass reads
	// at most.
	DefaultRenameSweepBatch = 500
)

// RenameSweeperConfig configures a RenameSweeper: Schedule defaults to
// DefaultRenameSweepSchedule, Threshold (how old a user's syncing flag must
// be before the pass enqueues a sync job; longer than a rename job normally
// takes) to DefaultRenameSweepThreshold, Batch to DefaultRenameSweepBatch.
type RenameSweeperConfig recovery.SweepConfig

// WithDefaults returns c with every unset field set to its default.
func (c RenameSweeperConfig) WithDefaults() RenameSweeperConfig {
	return RenameSweeperConfig(recovery.SweepConfig(c).WithDefaults(recovery.SweepConfig{
		Schedule: DefaultRenameSweepSchedule, Threshold: DefaultRenameSweepThreshold, Batch: DefaultRenameSweepBatch,
	}))
}

// Validate reports the first invalid field, naming it and its value.
func (c RenameSweeperConfig) Validate() error {
	return recovery.SweepConfig(c).Validate("renameSweeper")
}

// RenameSweeper finishes renames whose job was lost: a rename-user job that
// died (its attempts used up, or a bug) after setting the user's name, so
// that the user's comments may still carry an older name. Every user whose
// syncing flag is older than the threshold gets a sync-only rename-user
// job, which copies the user's current name into their comments and
// clears the flag.
type RenameSweeper struct {
	cfg   RenameSweeperConfig
	users *mongo.Collection
	q     *queue.Client
	log   *zap.Logger
}

// NewRenameSweeper returns a RenameSweeper for the users in db, enqueueing
// its jobs with q.
func NewRenameSweeper(db *mongo.Database, q *queue.Client, cfg RenameSweeperConfig) (*RenameSweeper, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &RenameSweeper{
		cfg:   cfg,
		users: db.Collection(UsersCollection, options.Collection().SetReadPreference(readpref.Primary())),
		q:     q,
		log:   cfg.Logger.Named("rename-sweeper"),
	}, nil
}

// Schedule returns the sweeper's cron spec.
func (s *RenameSweeper) Schedule() string { return s.cfg.Schedule }

// RunOnce makes one pass: every user whose syncing flag is older than the
// threshold gets a sync-only rename-user job, unless an unfinished one for
// them exists already (the unique key RenameSyncUniqueKey). It
// returns how many jobs it enqueued.
//
// Users are written by other apps too. The pass reads only users whose _id
// is a string (a rename names its user by a string) and decodes each one on
// its own: a user whose name is not a string, which a sync job could only
// fail on, is skipped with a log line, and no document can stop the pass.
func (s *RenameSweeper) RunOnce(ctx context.Context) (int, error) {
	cutoff := time.Now().Add(-s.cfg.Threshold)
	enqueued := 0
	after := "" // every string is $gte "": the first page starts there
	first := true
	for {
		idFilter := bson.D{{Key: "$gt", Value: after}}
		if first {
			idFilter = bson.D{{Key: "$gte", Value: after}}
		}
		filter := bson.D{
			{Key: "syncing", Value: bson.D{{Key: "$lt", Value: cutoff}}},
			{Key: "_id", Value: idFilter},
		}
		cur, err := s.users.Find(ctx, filter, options.Find().
			SetSort(bson.D{{Key: "_id", Value: 1}}).
			SetLimit(int64(s.cfg.Batch)).
			SetProjection(bson.D{{Key: "syncing", Value: 1}, {Key: "name", Value: 1}}))
		if err != nil {
			return enqueued, fmt.Errorf("recovery: find users with unsynced renames: %w", err)
		}
		due, read, last, err := s.decodeDue(ctx, cur)
		if err != nil {
			return enqueued, err
		}
		if len(due) > 0 {
			n, err := s.enqueue(ctx, due)
			enqueued += n
			if err != nil {
				return enqueued, err
			}
		}
		if read < s.cfg.Batch {
			break
		}
		after, first = last, false
	}
	return enqueued, nil
}

// dueUser is a user whose rename needs a sync job.
type dueUser struct {
	id      string
	syncing time.Time
}

// decodeDue reads one page of users, each decoded on its own, and returns
// those that get a sync job, how many documents it read, and the last _id.
func (s *RenameSweeper) decodeDue(ctx context.Context, cur *mongo.Cursor) (due []dueUser, read int, last string, err error) {
	defer closeCursor(ctx, cur)
	for cur.Next(ctx) {
		read++
		doc := cur.Current
		id, ok := doc.Lookup("_id").StringValueOK()
		if !ok { // the filter reads string ids only
			continue
		}
		last = id
		syncing, ok := doc.Lookup("syncing").TimeOK()
		if !ok {
			continue // the filter reads dates only
		}
		if name := doc.Lookup("name"); name.Type != bson.TypeString {
			s.log.Warn("user with an unsynced rename has a name that is not a string; a sync job would fail, skipping the user",
				zap.String("user_id", id), zap.Stringer("name_type", name.Type), zap.Time("syncing", syncing))
			continue
		}
		due = append(due, dueUser{id: id, syncing: syncing})
	}
	if err := cur.Err(); err != nil {
		return nil, read, last, fmt.Errorf("recovery: read users with unsynced renames: %w", err)
	}
	return due, read, last, nil
}

// enqueue enqueues a sync-only job for each user of due that has none
// unfinished, and returns how many it enqueued.
func (s *RenameSweeper) enqueue(ctx context.Context, due []dueUser) (int, error) {
	ins := make([]queue.Insert, len(due))
	for i, u := range due {
		ins[i] = queue.Insert{
			Kind: RenameKind,
			Args: RenameArgs{UserID: u.id, Sync: true},
			Opts: queue.InsertOpts{UniqueKey: RenameSyncUniqueKey(u.id)},
		}
	}
	res, err := s.q.EnqueueMany(ctx, ins)
	if err != nil {
		return 0, fmt.Errorf("recovery: enqueue sync jobs for unsynced renames: %w", err)
	}
	enqueued := 0
	for i, r := range res {
		if r.Duplicate {
			continue // its sync job is waiting, retrying or running
		}
		enqueued++
		s.log.Info("enqueued a sync job for an unsynced rename",
			zap.String("user_id", due[i].id), zap.Time("syncing", due[i].syncing), zap.String("job_id", r.ID))
	}
	return enqueued, nil
}

// Run is a cron job: one pass, with its error logged.
func (s *RenameSweeper) Run() { runPass(s.log, "rename sweeper pass", s.RunOnce) }
