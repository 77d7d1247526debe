// Package configs loads a docket process's configuration: a YAML file (see
// configs/docket.yaml), then DOCKET_* environment variables, then
// command-line flags, each overriding the one before, all into one Config:
// the docket.Config a client takes, and what only a process needs (its
// server, HTTP endpoint, logging, dashboard). One table of settings names
// each key, variable and flag and the field it sets, so errors name the
// setting at fault as the user wrote it (docs/CONFIGURATION.md lists them).
//
// A program of yours reads the same settings as docket's worker command:
//
//	fs := flag.NewFlagSet("app", flag.ExitOnError)
//	cfg, err := configs.Load(fs, "worker", os.Args[1:], os.Getenv)
//	...
//	logger, err := cfg.Log.NewLogger(os.Stderr)
//	mc, err := mongo.Connect(cfg.Mongo.ClientOptions())
//	...
//	cfg.Client.Logger = logger
//	client, err := docket.NewClient(mc.Database(cfg.Mongo.DB), cfg.Client)
//
// LoadApp adds the application's own settings (App) to the same file,
// variables and flags.
package configs
