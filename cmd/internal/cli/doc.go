// Package cli holds the main functions of docket's commands, so that the
// commands in cmd/ and the test binaries that add test-only job kinds run
// the very same code.
package cli
