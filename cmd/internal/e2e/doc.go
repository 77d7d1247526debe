// Package e2e holds docket's multi-process tests: real worker and enqueue
// processes, real signals (SIGKILL, SIGSTOP, SIGTERM), a real server.
package e2e
