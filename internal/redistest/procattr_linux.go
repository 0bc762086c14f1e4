package redistest

import "syscall"

// dieWithParent has the kernel kill the started process when the thread that started it
// ends; a Go program's threads live as long as it does (the runtime ends none that a
// goroutine has not locked), so in effect when the test process ends, however it ends.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
