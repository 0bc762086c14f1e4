package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// foregroundTTY returns the descriptor of latchkey's terminal (its stdin) when latchkey
// runs in the terminal's foreground, and -1 otherwise. The command, in a process group of
// its own, is then put in the foreground in latchkey's place: a background group reading
// the terminal would be stopped (SIGTTIN), and Ctrl-C would not reach it.
func foregroundTTY() int {
	fd := int(os.Stdin.Fd())
	if !term.IsTerminal(fd) {
		return -1
	}
	if pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err != nil || pgrp != syscall.Getpgrp() {
		return -1
	}
	return fd
}

// restoreForeground gives the terminal back to latchkey's process group once the command
// has exited. A background group setting the foreground is sent SIGTTOU, which is ignored
// meanwhile.
func restoreForeground(fd int) {
	if fd < 0 {
		return
	}
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, syscall.Getpgrp()) // a terminal gone has no foreground to give back
}
