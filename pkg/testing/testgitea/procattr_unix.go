//go:build unix && !linux

package testgitea

import "syscall"

// sysProcAttr puts a child in its own process group, so that Stop can end
// it with whatever it started. Only Linux can also tie the child's life to
// the test binary's.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
