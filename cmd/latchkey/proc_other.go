//go:build unix && !linux

package main

import "syscall"

// childAttr puts the command in a process group of its own, so that the signals run passes
// on and the termination of a lost lease reach everything it started. Only Linux can have
// the command killed when latchkey dies.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
