package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

// child is the command run runs, in a process group of its own.
type child struct {
	cmd  *exec.Cmd
	done chan error // the command's Wait, once it has started
	tty  int        // the terminal the command has the foreground of, or -1
}

// startChild starts args with env added to latchkey's environment. It returns the status
// the shell would give for a command that cannot be started (126, 127) with its error.
func startChild(args []string, env []string, stdout, stderr io.Writer) (*child, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(), env...)
	tty := foregroundTTY()
	cmd.SysProcAttr = childAttr(tty)
	c := &child{cmd: cmd, done: make(chan error, 1), tty: tty}
	started := make(chan error, 1)
	go func() {
		// Linux's parent-death signal follows the thread that started the child: keep that
		// thread for as long as the child runs, so the signal means latchkey's death only.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.done <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		restoreForeground(tty) // the child may have taken it before its exec failed
		code := exitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return nil, &exitStatus{code: code, msg: err.Error()}
	}
	return c, nil
}

// signal sends sig to the command's process group. A group already gone is no error: the
// command has exited and its Wait is about to say so.
func (c *child) signal(sig syscall.Signal) {
	_ = syscall.Kill(-c.cmd.Process.Pid, sig)
}

// status turns the command's Wait error into the status latchkey exits with: the command's
// own, 128+n for a command killed by signal n, as shells report it.
func status(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return exitFail, err
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignalOffset + int(ws.Signal()), nil
	}
	return ee.ExitCode(), nil
}

// supervise waits for the command to exit, passing on the signals latchkey gets and ending
// the command when its lease is lost: SIGTERM, then SIGKILL after grace. It returns whether the
// lease was lost and the Wait error.
func (c *child) supervise(sigs <-chan os.Signal, lost <-chan struct{}, grace time.Duration, stderr io.Writer, what string) (bool, error) {
	var kill <-chan time.Time
	wasLost := false
	if c.tty >= 0 {
		// While the command has the terminal latchkey is in the background, where with
		// tostop a write of its own to the terminal would stop it: it must stay free to
		// end the command (restoreForeground resets this).
		signal.Ignore(syscall.SIGTTOU)
	}
	for {
		select {
		case err := <-c.done:
			restoreForeground(c.tty)
			return wasLost, err
		case sig := <-sigs:
			if s, ok := sig.(syscall.Signal); ok {
				c.signal(s)
			}
		case <-lost:
			lost, wasLost = nil, true
			c.signal(syscall.SIGTERM)
			fmt.Fprintf(stderr, "latchkey run: the lease of %s was lost: sent the command SIGTERM, SIGKILL in %v\n", what, grace)
			t := time.NewTimer(grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			fmt.Fprintf(stderr, "latchkey run: the command outlived its grace of %v: sending SIGKILL\n", grace)
			c.signal(syscall.SIGKILL)
		}
	}
}
