package testgitea

import "syscall"

// sysProcAttr puts a child in its own process group, so that Stop can end
// it with whatever it started, and has the kernel kill it if the test
// binary dies first (a panic, go test's timeout), so that no Gitea
// outlives its tests. (Strictly, the signal comes when the OS thread that
// started the child ends; Go ends its threads only in rare cases, so in
// practice that is the binary's end.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
