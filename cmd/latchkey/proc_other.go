//go:build unix && !linux

package main

import "syscall"

// childAttr puts the command in a process group of its own, so that the signals run passes
// on and the termination of a lost lease reach everything it started; with tty (not -1),
// the terminal's foreground one. Only Linux can have the command killed when latchkey dies.
func childAttr(tty int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Foreground: tty >= 0, Ctty: max(tty, 0)}
}
