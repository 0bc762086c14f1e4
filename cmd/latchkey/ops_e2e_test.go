package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
)

// A script waits for N workers: the latch opens at the last count-down, not before.
func TestLatchCommand(t *testing.T) {
	t.Parallel()
	url, rdb := server(t)
	if r := latchkey(t, url, "latch", "workers", "set", "2"); r.code != 0 {
		t.Fatalf("set: exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	if r := latchkey(t, url, "latch", "workers", "set", "5"); r.code != exitFail || !strings.Contains(r.stderr, "has a count already (2)") {
		t.Errorf("set again: exit status %d, stderr %q; want 1 and the count", r.code, r.stderr)
	}
	if r := latchkey(t, url, "latch", "workers", "await", "--timeout", "500ms"); r.code != exitNotAcquired || !strings.Contains(r.stderr, "still counts 2") {
		t.Errorf("await before the count-downs: exit status %d, stderr %q; want %d", r.code, r.stderr, exitNotAcquired)
	}
	var stderr syncBuffer
	awaiter := latchkeyCmd(t, url, "latch", "workers", "await")
	awaiter.Stderr = &stderr
	if err := awaiter.Start(); err != nil {
		t.Fatal(err)
	}
	subscribed(t, rdb, "redisson_countdownlatch__channel__{workers}")
	if r := latchkey(t, url, "latch", "workers", "count-down"); r.code != 0 {
		t.Fatalf("count-down: exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	if n, err := rdb.Do(context.Background(), rdb.B().Get().Key("workers").Build()).AsInt64(); err != nil || n != 1 {
		t.Fatalf("count after one count-down: %d, %v; want 1", n, err)
	}
	if r := latchkey(t, url, "latch", "workers", "count-down"); r.code != 0 {
		t.Fatalf("count-down: exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	if code := exitCodeOf(t, awaiter.Wait()); code != 0 {
		t.Errorf("await: exit status %d; stderr:\n%s", code, stderr.String())
	}
}

func TestSemaphoreCommand(t *testing.T) {
	t.Parallel()
	url, _ := server(t)
	for _, step := range []struct {
		args []string
		out  string
	}{
		{[]string{"set", "3"}, ""},
		{[]string{"available"}, "3\n"},
		{[]string{"add", "2"}, ""},
		{[]string{"available"}, "5\n"},
		{[]string{"add", "--", "-4"}, ""},
		{[]string{"available"}, "1\n"},
	} {
		r := latchkey(t, url, append([]string{"semaphore", "gate"}, step.args...)...)
		if r.code != 0 || r.stdout != step.out {
			t.Fatalf("semaphore gate %v: exit status %d, stdout %q; want 0, %q; stderr:\n%s", step.args, r.code, r.stdout, step.out, r.stderr)
		}
	}
	// A runner takes one of the permits the command set, and gives it back.
	r := latchkey(t, url, "run", "--semaphore", "gate", "--permits", "9", "--", "sh", "-c", `"$0" semaphore gate available`, binary)
	if r.code != 0 || r.stdout != "0\n" {
		t.Errorf("available while running: exit status %d, stdout %q; want 0, \"0\\n\"; stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, `semaphore "gate" has 1 permits in all, not --permits 9`) {
		t.Errorf("no warning that --permits differs from the semaphore's:\n%s", r.stderr)
	}
	if r := latchkey(t, url, "semaphore", "gate", "available"); r.stdout != "1\n" {
		t.Errorf("available after the run: %q, want 1", r.stdout)
	}
}

// Force unlock frees a lock whoever holds it, and the holder's runner ends with lease lost.
func TestUnlockForce(t *testing.T) {
	t.Parallel()
	url, rdb := server(t)
	var stdout syncBuffer
	holder := latchkeyCmd(t, url, "run", "--lock", "stuck", "--lease", "3s", "--", "sh", "-c", "echo ready; exec sleep 60")
	holder.Stdout = &stdout
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, e2eTimeout, "the holder's command started", contains(&stdout, "ready"))
	r := latchkey(t, url, "unlock", "--force", "stuck") // stdin is not a terminal: no question
	if r.code != 0 || !strings.Contains(r.stdout, `"stuck" force-unlocked`) {
		t.Fatalf("unlock: exit status %d, stdout %q; stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if exists(t, rdb, "stuck") {
		t.Error("the lock still exists")
	}
	if code := exitCodeOf(t, holder.Wait()); code != exitLeaseLost {
		t.Errorf("the holder's runner: exit status %d, want %d", code, exitLeaseLost)
	}
	if r := latchkey(t, url, "unlock", "--force", "stuck"); r.code != 0 || !strings.Contains(r.stdout, "not locked") {
		t.Errorf("unlock of a free lock: exit status %d, stdout %q", r.code, r.stdout)
	}
	if r := latchkey(t, url, "semaphore", "s", "set", "1"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if r := latchkey(t, url, "unlock", "--force", "s"); r.code != exitFail || !strings.Contains(r.stderr, "only locks") {
		t.Errorf("unlock of a semaphore: exit status %d, stderr %q; want 1 and why", r.code, r.stderr)
	}
}

// On a terminal, unlock asks first; anything but yes changes nothing.
func TestUnlockAsksOnTerminal(t *testing.T) {
	t.Parallel()
	url, rdb := server(t)
	c := dsyncClient(t, rdb)
	if err := c.Lock("asked").Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, answer := range []string{"n", "y"} {
		out, tty, wait := onTerminal(t, url, "unlock", "--force", "asked")
		eventually(t, e2eTimeout, "the question", contains(out, `Force-unlock lock "asked"? [y/N]`))
		if !strings.Contains(out.String(), c.ID()) {
			t.Errorf("the question does not show the holder:\n%s", out.String())
		}
		if _, err := io.WriteString(tty, answer+"\n"); err != nil {
			t.Fatal(err)
		}
		code, want := wait(), exitFail
		if answer == "y" {
			want = exitOK
		}
		if code != want {
			t.Errorf("answer %s: exit status %d, want %d:\n%s", answer, code, want, out.String())
		}
		if held := exists(t, rdb, "asked"); held != (answer == "n") {
			t.Errorf("answer %s: lock held afterwards %v", answer, held)
		}
	}
}

// --watch prints again every interval until interrupted, one JSON document a line with --json.
func TestInspectWatch(t *testing.T) {
	t.Parallel()
	url, rdb := server(t)
	var stdout syncBuffer
	watch := latchkeyCmd(t, url, "inspect", "--watch", "--json", "--interval", "100ms", "w")
	watch.Stdout = &stdout
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, e2eTimeout, "a first print", contains(&stdout, `"kind":"none"`))
	c := dsyncClient(t, rdb)
	if err := c.Lock("w").Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, e2eTimeout, "a print after the change", contains(&stdout, `"kind":"lock"`))
	if err := watch.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := exitCodeOf(t, watch.Wait()); code != 0 {
		t.Errorf("exit status %d after an interrupt, want 0", code)
	}
	for i, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var states []state
		if err := json.Unmarshal([]byte(line), &states); err != nil || len(states) != 1 || states[0].Name != "w" {
			t.Errorf("line %d is not a document of name w: %q (%v)", i+1, line, err)
		}
	}
}
