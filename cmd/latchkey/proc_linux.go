package main

import "syscall"

// childAttr puts the command in a process group of its own, so that the signals run passes
// on and the termination of a lost lease reach everything it started, and has the kernel
// kill it should latchkey die without releasing (kill -9): its lock lapses with the lease,
// and the command must not run on beside the next holder. With tty (not -1), the group is
// made the terminal's foreground one, so that the command can read the terminal and gets
// its Ctrl-C.
func childAttr(tty int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Foreground: tty >= 0, Ctty: max(tty, 0)}
}
