package handlers

import "github.com/docketq/docket/configs"

// Config is the configuration docket's demo kinds add to a worker's: the
// schedules of their maintenance. It implements configs.App, so the same
// file, DOCKET_* variables and flags set it, each as its Settings name it.
type Config struct {
	// RenameSweeper re-syncs users whose rename sync stalled.
	RenameSweeper RenameSweeperConfig
	// TransferRecovery finishes transfers whose job stalled or died.
	TransferRecovery TransferRecoveryConfig
	// TreeSweeper removes tree versions no reader can need.
	TreeSweeper TreeSweeperConfig
	// LedgerSweeper commits the ledger and caches its balances.
	LedgerSweeper LedgerSweeperConfig
}

// Defaults implements configs.App.
func (c *Config) Defaults() {
	c.RenameSweeper = c.RenameSweeper.WithDefaults()
	c.TransferRecovery = c.TransferRecovery.WithDefaults()
	c.TreeSweeper = c.TreeSweeper.WithDefaults()
	c.LedgerSweeper = c.LedgerSweeper.WithDefaults()
}

// Validate implements configs.App.
func (c *Config) Validate() error {
	for _, err := range []error{c.RenameSweeper.Validate(), c.TransferRecovery.Validate(), c.TreeSweeper.Validate(), c.LedgerSweeper.Validate()} {
		if err != nil {
			return err
		}
	}
	return nil
}

// Settings implements configs.App.
func (c *Config) Settings() []configs.Setting {
	return []configs.Setting{
		configs.StringSetting("renameSweeper.schedule", "DOCKET_RENAME_SWEEP_SCHEDULE", "rename-sweep-schedule", "cron schedule of the rename sweeper", &c.RenameSweeper.Schedule),
		configs.DurationSetting("renameSweeper.threshold", "DOCKET_RENAME_SWEEP_THRESHOLD", "rename-sweep-threshold", "age of a syncing flag that the sweeper repairs", &c.RenameSweeper.Threshold),
		configs.IntSetting("renameSweeper.batch", "", "", "users read per page", &c.RenameSweeper.Batch),
		configs.StringSetting("transferRecovery.schedule", "DOCKET_TRANSFER_RECOVERY_SCHEDULE", "transfer-recovery-schedule", "cron schedule of transfer recovery", &c.TransferRecovery.Schedule),
		configs.DurationSetting("transferRecovery.threshold", "DOCKET_TRANSFER_RECOVERY_THRESHOLD", "transfer-recovery-threshold", "age of an unfinished transaction that recovery finishes", &c.TransferRecovery.Threshold),
		configs.IntSetting("transferRecovery.batch", "", "", "transactions read per page", &c.TransferRecovery.Batch),
		configs.StringSetting("treeSweeper.schedule", "DOCKET_TREE_SWEEP_SCHEDULE", "tree-sweep-schedule", "cron schedule of the tree sweeper", &c.TreeSweeper.Schedule),
		configs.IntSetting("treeSweeper.keep", "DOCKET_TREE_KEEP", "tree-keep", "published versions of each tree kept readable", &c.TreeSweeper.Keep),
		configs.StringSetting("ledgerSweeper.schedule", "DOCKET_LEDGER_SWEEP_SCHEDULE", "ledger-sweep-schedule", "cron schedule of the ledger sweeper (commit and cache)", &c.LedgerSweeper.Schedule),
		configs.DurationSetting("ledgerSweeper.threshold", "DOCKET_LEDGER_ABANDON_AFTER", "ledger-abandon-after", "age of a seqId claim without its transaction that the ledger sweeper cancels as abandoned", &c.LedgerSweeper.Threshold),
		configs.IntSetting("ledgerSweeper.batch", "DOCKET_LEDGER_SWEEP_BATCH", "ledger-sweep-batch", "changes the ledger sweeper folds per account and pass", &c.LedgerSweeper.Batch),
	}
}

// Maintenance returns the demo kinds' maintenance passes, configured by
