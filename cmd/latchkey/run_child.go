package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// child is the command run runs, under its guard (see guard), in a process group of its
// own: the guard leads it.
type child struct {
	cmd      *exec.Cmd
	done     chan error // the guard's Wait, once it has started
	tty      int        // the terminal the group has the foreground of, or -1
	lifeline *os.File   // the guard's lifeline: closed when latchkey is gone
}

// startChild starts args with env added to latchkey's environment, under a guard. It
// returns the status the shell would give for a command that cannot be started (126, 127)
// with its error.
func startChild(args []string, env []string, stdout, stderr io.Writer) (*child, error) {
	if _, err := exec.LookPath(args[0]); err != nil {
		code := exitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return nil, &exitStatus{code: code, msg: err.Error()}
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("the guard of the command: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("the guard's lifeline: %w", err)
	}
	defer r.Close() // the guard's now
	cmd := exec.Command(self, append([]string{guardArg, "--"}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(), env...)
	cmd.ExtraFiles = []*os.File{r} // the guard's descriptor 3
	tty := foregroundTTY()
	// A process group of its own, so that the signals run passes on and the termination of
	// a lost lease reach everything the command started; with a terminal, the terminal's
	// foreground group, so that the command reads it and gets its Ctrl-C.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Foreground: tty >= 0, Ctty: max(tty, 0)}
	if err := cmd.Start(); err != nil {
		w.Close()
		restoreForeground(tty) // the child may have taken it before its exec failed
		return nil, fmt.Errorf("the guard of the command: %w", err)
	}
	c := &child{cmd: cmd, done: make(chan error, 1), tty: tty, lifeline: w}
	go func() { c.done <- cmd.Wait() }()
	return c, nil
}

// guardArg is the hidden first argument that makes latchkey a guard.
const guardArg = "__guard"

// guard runs the command args (after "--") as its child, in its own process group, and
// exits with the command's status (128+n for a signal n). Should latchkey die without
// releasing (kill -9), its lock lapses with the lease, and nothing it ran may go on beside
// the next holder: the guard learns of it when its lifeline (descriptor 3, a pipe whose
// other end only latchkey has) reaches its end, and kills its whole group — the command and
// whatever it started. The signals latchkey passes on to the group are the command's: the
// guard takes them and does nothing, so that it stays to report the command's status.
func guard(args []string, stderr io.Writer) int {
	if len(args) < 2 || args[0] != "--" {
		fmt.Fprintln(stderr, "latchkey: "+guardArg+" is latchkey's own, not a command")
		return exitUsage
	}
	lifeline := os.NewFile(3, "lifeline")
	syscall.CloseOnExec(3) // the command's children must not keep latchkey's lifeline
	// Handled, not ignored: the command starts with their default actions.
	signal.Notify(make(chan os.Signal, 1), forwarded()...)
	cmd := exec.Command(args[1], args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, "latchkey run: "+err.Error())
		return exitCannotExec
	}
	go func() {
		_, _ = io.Copy(io.Discard, lifeline) // returns when latchkey is gone
		_ = syscall.Kill(0, syscall.SIGKILL) // the whole group, the guard too
	}()
	code, err := status(cmd.Wait())
	if err != nil {
		fmt.Fprintln(stderr, "latchkey run: "+err.Error())
	}
	return code
}

// stops reports each time the guard stops: Ctrl-Z on the terminal stops the command's whole
// group. It ends once the guard is reaped (its Wait).
func (c *child) stops() <-chan struct{} {
	ch := make(chan struct{}, 1)
	go func() {
		for {
			var info unix.Siginfo
			if err := unix.Waitid(unix.P_PID, c.cmd.Process.Pid, &info, unix.WSTOPPED, nil); err != nil {
				if err == unix.EINTR {
					continue
				}
				return
			}
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	return ch
}

// suspend does what a shell expects of a job whose command Ctrl-Z stopped: latchkey takes
// the terminal back and stops too, so that the shell sees its job stopped. Continued (fg),
// it gives the command the terminal again, and continues it; continued in the background
// (bg), it continues it there. Meanwhile nothing renews the lease: a job stopped longer
// than it loses the lock, and its command is ended once continued.
func (c *child) suspend() {
	restoreForeground(c.tty)
	signal.Ignore(syscall.SIGTTOU) // restoreForeground resets it; the command is not done
	// A stop takes hold of every thread soon, not at once: what follows waits for the
	// continue, not merely for the stop's sending.
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	_ = syscall.Kill(0, syscall.SIGSTOP) // latchkey's own process group: the shell's job
	<-cont
	if pgrp, err := unix.IoctlGetInt(c.tty, unix.TIOCGPGRP); err == nil && pgrp == syscall.Getpgrp() {
		_ = unix.IoctlSetPointerInt(c.tty, unix.TIOCSPGRP, c.cmd.Process.Pid)
	}
	c.signal(syscall.SIGCONT)
}

// signal sends sig to the command's process group (the guard takes it and does nothing). A
// group already gone is no error: the command has exited and its Wait is about to say so.
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
	var stops <-chan struct{}
	if c.tty >= 0 {
		// While the command has the terminal latchkey is in the background, where with
		// tostop a write of its own to the terminal would stop it: it must stay free to
		// end the command (restoreForeground resets this).
		signal.Ignore(syscall.SIGTTOU)
		stops = c.stops()
	}
	for {
		select {
		case <-stops:
			c.suspend()
		case err := <-c.done:
			c.lifeline.Close()
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
