// Package handlers holds docket's job handlers, one file per kind. Every
// handler is idempotent: running any step twice, or resuming after a crash
// between any two of its writes, ends in the same state as one clean run.
package handlers
