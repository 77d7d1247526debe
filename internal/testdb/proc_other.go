//go:build !linux

package testdb

import "syscall"

// sysProcAttr returns nil: only Linux can tie a subprocess's life to the
// test binary's.
func sysProcAttr() *syscall.SysProcAttr {
	return nil
}

// lockBuilds does nothing: builds of several test binaries may overlap.
func lockBuilds() (func(), error) {
	return func() {}, nil
}
