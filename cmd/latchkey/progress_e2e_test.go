package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/creack/pty"
	"github.com/redis/rueidis"
)

// onTerminal starts latchkey with args on a pseudo-terminal of 200 columns (wide enough
// for a whole progress line) and returns what the terminal shows, as it comes, where to type,
// and a func that waits for the exit status.
func onTerminal(t *testing.T, url string, args ...string) (*syncBuffer, io.Writer, func() int) {
	t.Helper()
	return onTerminalSized(t, 200, url, args...)
}

// onTerminalSized is onTerminal on a terminal cols columns wide.
func onTerminalSized(t *testing.T, cols uint16, url string, args ...string) (*syncBuffer, io.Writer, func() int) {
	t.Helper()
	cmd := latchkeyCmd(t, url, args...)
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(out, tty) // ends with EIO once the process has exited
	}()
	wait := func() int {
		code := exitCodeOf(t, cmd.Wait())
		<-copied
		_ = tty.Close()
		return code
	}
	t.Cleanup(func() { _ = tty.Close() })
	return out, tty, wait
}

// The live line while waiting shows the time waited, the holder and its lease, the place
// in a fair queue and the permits free, and is erased once the wait is over.
func TestProgressOnTerminal(t *testing.T) {
	t.Parallel()
	url, rdb := server(t)
	c := dsyncClient(t, rdb)
	ctx := context.Background()

	lock := c.Lock("p")
	fair := c.FairLock("pf")
	sem := c.PermitSemaphore("ps")
	if err := lock.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fair.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sem.SetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	permit, err := sem.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		args    []string
		want    []string
		release func(context.Context) error
	}{
		{"lock", []string{"--lock", "p"}, []string{`waiting `, `for lock "p"`, "held by " + lock.Owner(), " left"}, lock.Unlock},
		{"fair", []string{"--lock", "pf", "--fair"}, []string{`for fair lock "pf"`, "held by " + fair.Owner(), "queue position 1 of 1"}, fair.Unlock},
		{"semaphore", []string{"--semaphore", "ps", "--permits", "1"}, []string{`for a permit of semaphore "ps"`, "0 of 1 permits free"}, permit.Release},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, _, wait := onTerminal(t, url, append(append([]string{"run"}, tt.args...), "--", "sh", "-c", "echo ran")...)
			for _, want := range tt.want {
				eventually(t, e2eTimeout, "the progress line", contains(out, want))
			}
			if err := tt.release(context.Background()); err != nil {
				t.Fatal(err)
			}
			if code := wait(); code != 0 {
				t.Fatalf("exit status %d; terminal:\n%q", code, out.String())
			}
			// The line is erased (blanks over it, back to its start) before the command's
			// output, which therefore begins a clean line.
			shown := out.String()
			before, _, ok := strings.Cut(shown, "ran\r\n")
			if !ok || !strings.HasSuffix(before, "\r") || strings.TrimRight(before[strings.LastIndex(before[:len(before)-1], "\r")+1:], "\r ") != "" {
				t.Errorf("the progress line was not erased before the command's output:\n%q", shown)
			}
		})
	}
}

// --quiet, or stderr not a terminal, shows no progress at all.
func TestProgressOnlyOnTerminal(t *testing.T) {
	t.Parallel()
	url, rdb := server(t)
	c := dsyncClient(t, rdb)
	l := c.FairLock("q")
	if err := l.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	queued := func(n int64) {
		count(t, rdb, "queued waiters", n, func(b rueidis.Builder) rueidis.Completed { return b.Llen().Key("redisson_lock_queue:{q}").Build() })
	}
	quiet, _, waitQuiet := onTerminal(t, url, "run", "--lock", "q", "--fair", "--quiet", "--", "true")
	queued(1)
	piped := latchkeyCmd(t, url, "run", "--lock", "q", "--fair", "--", "true")
	var stderr syncBuffer
	piped.Stderr = &stderr
	if err := piped.Start(); err != nil {
		t.Fatal(err)
	}
	queued(2)
	// A third waiter, on a terminal and not quiet, started after both were waiting: once it
	// has drawn its line (at its first tick), theirs had their first tick too.
	loud, _, waitLoud := onTerminal(t, url, "run", "--lock", "q", "--fair", "--", "true")
	queued(3)
	eventually(t, e2eTimeout, "the third waiter's line", contains(loud, `for fair lock "q"`))
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code := waitLoud(); code != 0 {
		t.Errorf("on a terminal: exit status %d", code)
	}
	if code := waitQuiet(); code != 0 {
		t.Errorf("--quiet: exit status %d", code)
	}
	if code := exitCodeOf(t, piped.Wait()); code != 0 {
		t.Errorf("piped: exit status %d", code)
	}
	if s := quiet.String(); s != "" {
		t.Errorf("--quiet on a terminal showed %q", s)
	}
	if s := stderr.String(); s != "" {
		t.Errorf("stderr not a terminal got %q", s)
	}
}

// On a terminal the command has the foreground: it reads what is typed, and Ctrl-C reaches
// it (once); either way the lock is released when it exits.
func TestRunCommandOwnsTerminal(t *testing.T) {
	t.Parallel()
	url, rdb := server(t)
	t.Run("reads", func(t *testing.T) {
		out, tty, wait := onTerminal(t, url, "run", "--lock", "tty", "--", "sh", "-c", `read a; echo "got $a"`)
		if _, err := io.WriteString(tty, "hello\n"); err != nil {
			t.Fatal(err)
		}
		if code := wait(); code != 0 || !strings.Contains(out.String(), "got hello") {
			t.Errorf("exit status %d, terminal %q; want 0 and the line read", code, out.String())
		}
	})
	t.Run("Ctrl-C", func(t *testing.T) {
		out, tty, wait := onTerminal(t, url, "run", "--lock", "tty", "--", "sh", "-c",
			`trap 'echo interrupted; exit 9' INT; echo ready; while :; do sleep 0.1; done`)
		eventually(t, e2eTimeout, "the command started", contains(out, "ready"))
		if _, err := io.WriteString(tty, "\x03"); err != nil {
			t.Fatal(err)
		}
		if code := wait(); code != 9 || strings.Count(out.String(), "interrupted") != 1 {
			t.Errorf("exit status %d, terminal %q; want the command's 9 after one interruption", code, out.String())
		}
	})
	t.Run("lease lost with tostop", func(t *testing.T) {
		// Run from an interactive shell, as a user does: latchkey's process group, in the
		// background while the command has the terminal, is then not orphaned, and with
		// tostop a write of its own to the terminal would stop it. It must still end the
		// command when the lease is lost, and say so.
		tty, out := interactiveShell(t, url)
		line := binary + ` run --lock tty-lost --lease 3s -- sh -c 'stty tostop; echo rea""dy; while :; do sleep 0.1; done'; echo "status=$?"` + "\n"
		if _, err := io.WriteString(tty, line); err != nil {
			t.Fatal(err)
		}
		eventually(t, e2eTimeout, "the command started", contains(out, "ready"))
		if err := rdb.Do(context.Background(), rdb.B().Del().Key("tty-lost").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		want := "status=" + strconv.Itoa(exitLeaseLost)
		eventually(t, e2eTimeout, "the lease-lost status", contains(out, want))
		if !strings.Contains(out.String(), "was lost") {
			t.Errorf("terminal %q: want latchkey's message that the lease was lost", out.String())
		}
	})
	t.Run("Ctrl-Z", func(t *testing.T) {
		// From an interactive shell: Ctrl-Z stops the job — the command and latchkey — and
		// the shell says so and prompts; fg continues it, with the terminal the command's
		// again, and the lock still held.
		tty, out := interactiveShell(t, url)
		line := binary + ` run --lock tty-stop -- sh -c 'echo rea""dy; read line; echo "got $line"'` + "\n"
		if _, err := io.WriteString(tty, line); err != nil {
			t.Fatal(err)
		}
		eventually(t, e2eTimeout, "the command started", contains(out, "ready"))
		if _, err := io.WriteString(tty, "\x1a"); err != nil {
			t.Fatal(err)
		}
		eventually(t, e2eTimeout, "the shell's word that the job stopped, and its prompt", func() error {
			if _, after, ok := strings.Cut(out.String(), "Stopped"); !ok || !strings.Contains(after, "$ ") {
				return fmt.Errorf("no job stopped, or no prompt after it, in %q", out.String())
			}
			return nil
		})
		if !exists(t, rdb, "tty-stop") {
			t.Error("the lock was released as the job stopped")
		}
		if _, err := io.WriteString(tty, `fg; echo "sta""tus=$?"`+"\n"); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tty, "hello\n"); err != nil {
			t.Fatal(err)
		}
		eventually(t, e2eTimeout, "the command's line read, and its status", contains(out, "status=0"))
		if !strings.Contains(out.String(), "got hello") {
			t.Errorf("terminal %q: want the command to read the line after fg", out.String())
		}
	})
	if exists(t, rdb, "tty") || exists(t, rdb, "tty-stop") {
		t.Error("a lock is still held")
	}
}

// interactiveShell starts an interactive bash on a terminal of its own, as a user's, with
// latchkey's URL set; what it shows is in out. It exits when the test ends.
func interactiveShell(t *testing.T, url string) (tty *os.File, out *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
	sh := exec.CommandContext(ctx, "bash", "--norc", "--noprofile", "-i")
	sh.Env = append(os.Environ(), envRedisURL+"="+url, "PS1=$ ")
	tty, err := pty.StartWithSize(sh, &pty.Winsize{Rows: 24, Cols: 200})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	out = &syncBuffer{}
	go func() { _, _ = io.Copy(out, tty) }()
	t.Cleanup(func() {
		_, _ = io.WriteString(tty, "exit\n")
		_ = sh.Wait()
		_ = tty.Close()
		cancel()
	})
	return tty, out
}

// On a narrow terminal the line is cut to its width, or each redraw would wrap onto a new
// line instead of replacing the last.
func TestProgressFitsTerminal(t *testing.T) {
	t.Parallel()
	url, rdb := server(t)
	l := dsyncClient(t, rdb).Lock("narrow")
	if err := l.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, _, wait := onTerminalSized(t, 40, url, "run", "--lock", "narrow", "--", "true")
	eventually(t, e2eTimeout, "two draws", func() error {
		if n := strings.Count(out.String(), "latchkey: waiting"); n < 2 {
			return fmt.Errorf("%d draws in %q", n, out.String())
		}
		return nil
	})
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code := wait(); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	for _, draw := range strings.Split(out.String(), "\r") {
		if n := utf8.RuneCountInString(draw); n > 39 {
			t.Errorf("a draw of %d characters on a 40-column terminal: %q", n, draw)
		}
	}
}
