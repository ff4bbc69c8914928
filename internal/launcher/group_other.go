//go:build !linux

package launcher

import "syscall"

// groupAttr puts the process in its own group (this system has no
// parent-death signal: a crashed parent leaves it running).
func groupAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
