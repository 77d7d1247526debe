package devdbproc

import "syscall"

// sysProcAttr makes the server die with the process that started it, even
// when that process is killed and has no chance to stop it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
