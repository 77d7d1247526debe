//go:build !linux

package devdbproc

import "syscall"

// sysProcAttr returns nil: only Linux can tie a subprocess's life to its
// parent's.
func sysProcAttr() *syscall.SysProcAttr { return nil }
