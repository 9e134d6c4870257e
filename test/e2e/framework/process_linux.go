package framework

import "syscall"

// sysProcAttr puts a child in its own process group (a terminal's ^C reaches only the test,
// which stops the child itself) and kills it when the test binary dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
