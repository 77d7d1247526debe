// Package configs loads docket's configuration: a YAML file (see
// configs/docket.yaml), then DOCKET_* environment variables, then
// command-line flags, each overriding the one before. Every component keeps
// its own Config, with its defaults, in its own package; this package only
// puts them together and names the setting at fault when a value is bad.
package configs
