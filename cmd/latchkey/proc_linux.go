package main

import "syscall"

// childAttr puts the command in a process group of its own, so that the signals run passes
// on and the termination of a lost lease reach everything it started, and has the kernel
// kill it should latchkey die without releasing (kill -9): its lock lapses with the lease,
// and the command must not run on beside the next holder.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
