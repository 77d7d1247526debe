// Package configs loads a docket process's configuration: a YAML file (see
// configs/docket.yaml), then DOCKET_* environment variables, then
// command-line flags, each overriding the one before, all into one Config:
// the docket.Config a client takes, and what only a process needs (its
// server, HTTP endpoint, logging, dashboard). One table of settings names
// each key, variable and flag and the field it sets, so errors name the
// setting at fault as the user wrote it.
package configs
