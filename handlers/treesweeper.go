package handlers

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"
)

// Defaults for TreeSweeperConfig.
const (
	// DefaultTreeSweepSchedule is how often the tree sweeper runs.
	DefaultTreeSweepSchedule = "@every 1m"
)

// TreeSweeperConfig configures a TreeSweeper. Schedule defaults to
// DefaultTreeSweepSchedule, Keep (published versions of each tree kept
// readable) to DefaultTreeKeep.
type TreeSweeperConfig struct {
	Schedule string
	Keep     int
	Logger   *zap.Logger
}

// WithDefaults returns c with every unset field set to its default.
func (c TreeSweeperConfig) WithDefaults() TreeSweeperConfig {
	if c.Schedule == "" {
		c.Schedule = DefaultTreeSweepSchedule
	}
	if c.Keep == 0 {
		c.Keep = DefaultTreeKeep
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

// Validate reports the first invalid field, naming it and its value.
func (c TreeSweeperConfig) Validate() error {
	if c.Keep < 1 {
		return fmt.Errorf("treeSweeper.keep: %d must be at least 1", c.Keep)
	}
	return nil
}

// TreeSweeper removes the versions of published trees that no reader can
// need: those never published, and those older than the kept ones.
type TreeSweeper struct {
	db  *mongo.Database
	cfg TreeSweeperConfig
	log *zap.Logger
}

// NewTreeSweeper returns a TreeSweeper for the trees in db.
func NewTreeSweeper(db *mongo.Database, cfg TreeSweeperConfig) (*TreeSweeper, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &TreeSweeper{db: db, cfg: cfg, log: cfg.Logger.Named("tree-sweeper")}, nil
}

// Schedule returns the sweeper's cron spec.
func (s *TreeSweeper) Schedule() string { return s.cfg.Schedule }

// RunOnce makes one pass and returns how many node documents it removed.
func (s *TreeSweeper) RunOnce(ctx context.Context) (int, error) {
	return SweepTrees(ctx, s.db, s.cfg.Keep, s.log)
}

// Run is a cron job: one pass, with its error logged.
func (s *TreeSweeper) Run() { runPass(s.log, "tree sweep", s.RunOnce) }
