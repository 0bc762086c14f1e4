package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// Ten runners increment a counter in a file with a read, a pause and a write: without
// mutual exclusion they would overwrite each other's increments.
func TestRunExcludesConcurrentRunners(t *testing.T) {
	t.Parallel()
	url, rdb := server(t)
	counter := filepath.Join(t.TempDir(), "counter")
	if err := os.WriteFile(counter, []byte("0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	script := `n=$(cat "$1"); sleep 0.05; echo $((n + 1)) > "$1"`
	var wg sync.WaitGroup
	results := make([]result, 10)
	for i := range results {
		wg.Go(func() {
			results[i] = latchkey(t, url, "run", "--lock", "counter", "--", "sh", "-c", script, "sh", counter)
		})
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 {
			t.Errorf("runner %d: exit status %d, stderr:\n%s", i, r.code, r.stderr)
		}
	}
	got, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.TrimSpace(string(got)); n != "10" {
		t.Errorf("counter is %s after 10 runners, want 10", n)
	}
	if exists(t, rdb, "counter") {
		t.Error("the lock is still held after every runner exited")
	}
}

func TestRunExitStatus(t *testing.T) {
	t.Parallel()
	url, rdb := server(t)
	notExec := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		args   []string
		code   int
		stdout string
	}{
		{"zero", []string{"--lock", "x", "--", "sh", "-c", "echo out"}, 0, "out\n"},
		{"own status", []string{"--lock", "x", "--", "sh", "-c", "exit 7"}, 7, ""},
		{"fair", []string{"--lock", "x", "--fair", "--", "sh", "-c", "exit 3"}, 3, ""},
		{"semaphore", []string{"--semaphore", "s", "--permits", "2", "--", "sh", "-c", "exit 4"}, 4, ""},
		{"read", []string{"--read", "rw", "--", "sh", "-c", "exit 5"}, 5, ""},
		{"write", []string{"--write", "rw", "--", "sh", "-c", "exit 6"}, 6, ""},
		{"killed by signal", []string{"--lock", "x", "--", "sh", "-c", "kill -9 $$"}, 128 + 9, ""},
		{"not found", []string{"--lock", "x", "--", "no-such-command-latchkey"}, exitNotFound, ""},
		{"not executable", []string{"--lock", "x", "--", notExec}, exitCannotExec, ""},
		{"fenced token", []string{"--lock", "fx", "--fenced", "--", "sh", "-c", "echo token=$LATCHKEY_TOKEN"}, 0, "token=1\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := latchkey(t, url, append([]string{"run"}, tt.args...)...)
			if r.code != tt.code {
				t.Errorf("exit status %d, want %d; stderr:\n%s", r.code, tt.code, r.stderr)
			}
			if r.stdout != tt.stdout {
				t.Errorf("stdout %q, want %q", r.stdout, tt.stdout)
			}
		})
	}
	for _, key := range []string{"x", "rw", "fx", "{s}:timeout"} {
		if exists(t, rdb, key) {
			t.Errorf("%s is still held after its runner exited", key)
		}
	}
}

// A runner killed with -9 cannot release: its lock (or permit) must lapse with the lease, not
// earlier, and its command must die with it, with whatever the command started.
func TestRunKilledRunnerLetsNextInAtItsLease(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		target []string
		// left reads how long the lease has left, in ms.
		left func(rdb rueidis.Client) (int64, error)
	}{
		{"lock", []string{"--lock", "job"}, func(rdb rueidis.Client) (int64, error) {
			return rdb.Do(context.Background(), rdb.B().Pttl().Key("job").Build()).AsInt64()
		}},
		{"semaphore", []string{"--semaphore", "job", "--permits", "1"}, func(rdb rueidis.Client) (int64, error) {
			zs, err := rdb.Do(context.Background(), rdb.B().Zrange().Key("{job}:timeout").Min("0").Max("-1").Withscores().Build()).AsZScores()
			if err != nil || len(zs) != 1 {
				return 0, fmt.Errorf("acquired permits %v: %w", zs, err)
			}
			return int64(zs[0].Score) - time.Now().UnixMilli(), nil
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url, rdb := server(t)
			pidFile := filepath.Join(t.TempDir(), "pid")
			// The command's own child (sleep, in the background) must die with it too.
			args := append(append([]string{"run", "--lease", "3s"}, tt.target...), "--", "sh", "-c", `sleep 600 & echo $! > "$1"; wait`, "sh", pidFile)
			a := latchkeyCmd(t, url, args...)
			if err := a.Start(); err != nil {
				t.Fatal(err)
			}
			var pid int
			eventually(t, e2eTimeout, "the command started", func() error {
				b, err := os.ReadFile(pidFile)
				if err == nil && len(b) > 0 && b[len(b)-1] == '\n' {
					pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
				} else if err == nil {
					err = os.ErrNotExist
				}
				return err
			})
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // should it have outlived the runner
			if err := a.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = a.Wait()
			killed := time.Now()
			left, err := tt.left(rdb)
			if err != nil || left <= 0 {
				t.Fatalf("lease left after the kill: %d ms, %v; want it still running", left, err)
			}
			r := latchkey(t, url, append(append([]string{"run", "--wait", "30s"}, tt.target...), "--", "true")...)
			if r.code != 0 {
				t.Fatalf("the next runner: exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			// Read after the kill, so the lease ended no earlier than left after it: 100 ms for
			// the clocks' granularity.
			if waited := time.Since(killed); waited < time.Duration(left)*time.Millisecond-100*time.Millisecond {
				t.Errorf("the next runner got in %v after the kill, before the lease's %d ms ran out", waited, left)
			}
			eventually(t, e2eTimeout, "what the killed runner's command started died with it", func() error {
				return gone(pid)
			})
		})
	}
}

// gone returns nil once process pid has exited (a zombie counts: it runs no more).
func gone(pid int) error {
	if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
		return nil
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	if _, after, ok := strings.Cut(string(stat), ") "); ok && strings.HasPrefix(after, "Z") {
		return nil
	}
	return syscall.EEXIST
}

// The lock deleted under a runner: its command gets SIGTERM (or SIGKILL after the grace if
// it ignores that), and latchkey exits with the lease-lost status.
func TestRunLeaseLostTerminatesCommand(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, trap, want string
	}{
		{"SIGTERM", `trap 'echo got TERM; exit 0' TERM`, "got TERM"},
		{"SIGKILL after grace", `trap '' TERM`, "outlived its grace"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url, rdb := server(t)
			var stdout, stderr syncBuffer
			cmd := latchkeyCmd(t, url, "run", "--lock", "mig", "--lease", "3s", "--grace", "2s", "--",
				"sh", "-c", tt.trap+`; echo ready; while :; do sleep 0.1; done`)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			eventually(t, e2eTimeout, "the command started", contains(&stdout, "ready"))
			if err := rdb.Do(context.Background(), rdb.B().Del().Key("mig").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			code := exitCodeOf(t, cmd.Wait())
			if code != exitLeaseLost {
				t.Errorf("exit status %d, want %d", code, exitLeaseLost)
			}
			out := stdout.String() + stderr.String()
			for _, want := range []string{tt.want, "was lost"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// A wait that runs out exits with its own status and never runs the command.
func TestRunWaitTimeout(t *testing.T) {
	t.Parallel()
	url, rdb := server(t)
	c := dsyncClient(t, rdb)
	ctx := context.Background()
	if err := c.Lock("busy").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.RWLock("rw").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	sem := c.PermitSemaphore("sem")
	if err := sem.SetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := sem.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	for _, args := range [][]string{
		{"--lock", "busy", "--wait", "0"},
		{"--lock", "busy", "--wait", "1s"},
		{"--lock", "busy", "--fair", "--wait", "1s"},
		{"--read", "rw", "--wait", "1s"},
		{"--semaphore", "sem", "--permits", "1", "--wait", "1s"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			start := time.Now()
			r := latchkey(t, url, append(append([]string{"run"}, args...), "--", "touch", marker)...)
			if r.code != exitNotAcquired {
				t.Errorf("exit status %d, want %d; stderr:\n%s", r.code, exitNotAcquired, r.stderr)
			}
			if !strings.Contains(r.stderr, "not acquired within --wait") {
				t.Errorf("stderr does not say why:\n%s", r.stderr)
			}
			if args[len(args)-1] == "1s" && time.Since(start) < time.Second {
				t.Errorf("gave up after %v, before --wait 1s", time.Since(start))
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("the command ran without the lock")
			}
		})
	}
}

// Signals sent to latchkey reach the command; the lock is released when it exits.
func TestRunPassesSignalsOn(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			url, rdb := server(t)
			var stdout syncBuffer
			n := strconv.Itoa(int(sig))
			cmd := latchkeyCmd(t, url, "run", "--lock", "sig", "--", "sh", "-c",
				`trap 'echo got `+n+`; exit 5' `+n+`; echo ready; while :; do sleep 0.1; done`)
			cmd.Stdout = &stdout
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			eventually(t, e2eTimeout, "the command started", contains(&stdout, "ready"))
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := exitCodeOf(t, cmd.Wait()); code != 5 {
				t.Errorf("exit status %d, want the command's 5; stdout:\n%s", code, stdout.String())
			}
			if !strings.Contains(stdout.String(), "got "+n) {
				t.Errorf("the command did not get %v:\n%s", sig, stdout.String())
			}
			if exists(t, rdb, "sig") {
				t.Error("the lock is still held after the command exited")
			}
		})
	}
}

// A signal while waiting ends latchkey with 128+n, holding nothing.
func TestRunSignalWhileWaiting(t *testing.T) {
	t.Parallel()
	url, rdb := server(t)
	c := dsyncClient(t, rdb)
	l := c.FairLock("held")
	if err := l.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	cmd := latchkeyCmd(t, url, "run", "--lock", "held", "--fair", "--", "true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, e2eTimeout, "the runner queued", func() error {
		n, err := rdb.Do(context.Background(), rdb.B().Llen().Key("redisson_lock_queue:{held}").Build()).AsInt64()
		if err == nil && n != 1 {
			err = syscall.EAGAIN
		}
		return err
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitCodeOf(t, cmd.Wait()); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit status %d, want %d", code, 128+int(syscall.SIGTERM))
	}
	// Its place went with it: a place left behind would be the head at the release below, and
	// would hold the free lock up (only the head can take it) until it lapsed.
	if n, err := rdb.Do(context.Background(), rdb.B().Llen().Key("redisson_lock_queue:{held}").Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("fair queue after the runner left: %d places (%v), want none", n, err)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if exists(t, rdb, "held") {
		t.Error("the lock went to the runner that was stopped while waiting")
	}
}

// Readers hold a read-write lock together (each waits, holding it, for the other to be in);
// a writer is kept out meanwhile.
func TestRunReadersShareWritersExclude(t *testing.T) {
	t.Parallel()
	url, _ := server(t)
	dir := t.TempDir()
	mark := func(name string) string { return filepath.Join(dir, name) }
	// Each reader marks itself in, then waits, up to 30 s each, for the other's mark and for
	// the test's "done".
	reader := func(me, other string) []string {
		return []string{"run", "--read", "cfg", "--", "sh", "-c", `touch "$1"
			for f in "$2" "$3"; do i=0; while [ ! -e "$f" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done; done
			[ -e "$2" ]`, "sh", mark(me), mark(other), mark("done")}
	}
	var wg sync.WaitGroup
	var a, b result
	wg.Go(func() { a = latchkey(t, url, reader("a", "b")...) })
	wg.Go(func() { b = latchkey(t, url, reader("b", "a")...) })
	eventually(t, e2eTimeout, "a reader in", func() error {
		_, err := os.Stat(mark("a"))
		return err
	})
	w := latchkey(t, url, "run", "--write", "cfg", "--wait", "0", "--", "true")
	if err := os.WriteFile(mark("done"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if a.code != 0 || b.code != 0 {
		t.Errorf("readers: exit statuses %d and %d, want both in at once (0)", a.code, b.code)
	}
	if w.code != exitNotAcquired {
		t.Errorf("writer while reading: exit status %d, want %d", w.code, exitNotAcquired)
	}
}

// A signal while latchkey is still connecting ends it as one while it waits does (128+n),
// not as a failure to connect: here Redis accepts the connection and never answers.
func TestRunSignalWhileConnecting(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- conn
		}
	}()
	cmd := latchkeyCmd(t, "redis://"+ln.Addr().String(), "run", "--lock", "connecting", "--", "true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case conn := <-accepted:
		defer conn.Close()
	case <-time.After(e2eTimeout):
		t.Fatal("latchkey never connected")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitCodeOf(t, cmd.Wait()); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit status %d, want %d", code, 128+int(syscall.SIGTERM))
	}
}
