package launcher

import "syscall"

// groupAttr puts the process in its own group, SIGKILLed when its parent
// dies.
func groupAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
