package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// fastDemo is the demo scaled down to a few seconds; the proportions that make each section
// meaningful are kept (the lock is held over 3x its watchdog timeout). The times are wide
// enough for a loaded machine: B is blocked in Lock well before A's unlock (after 100 ms B
// had not always registered its Client), and renewals keep a 3 s lease with time to spare
// (a 150 ms one was lost; a 1 s one needs no more than a second's stall to be).
func fastDemo() demoConfig {
	cfg := defaultDemoConfig()
	cfg.instances = 2
	cfg.buyers = 10
	cfg.stock = 8
	cfg.wakeHold = time.Second
	cfg.leaseTimeout = 3 * time.Second
	cfg.leaseHold = 9300 * time.Millisecond
	cfg.leaseSamples = 3
	cfg.callers = 10
	cfg.permits = 3
	cfg.workers = 6
	cfg.workStep = 5 * time.Millisecond
	cfg.stepTimeout = 30 * time.Second
	return cfg
}

func TestRunDemo(t *testing.T) {
	var out bytes.Buffer
	if err := runDemo(t.Context(), &out, fastDemo()); err != nil {
		t.Fatalf("runDemo: %v\noutput:\n%s", err, out.String())
	}
	got := out.String()
	_, withLock, ok := strings.Cut(got, "WITH a lock")
	if !ok {
		t.Fatalf("no with-lock section in output:\n%s", got)
	}
	for _, want := range []string{
		"sold 8, stock left in Redis 0, oversold 0,",
		"message \"0\" published on {demo:wake}:lock_clients:",
		"(client B's own channel: the release wakes B's client alone)",
		"message \"00\" published on redisson_lock__channel:{demo:wake} (Redisson's unlock message, 00, which Java reads as 0: for Java waiters; latchkey's waiters let it pass)",
		"Lost() is still open",
		"All invariants held",
	} {
		if !strings.Contains(withLock, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestRunCommandLine(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string // a substring stdout must hold
		stderr     string // a substring stderr must hold
		emptyOut   bool   // stdout must be empty
		emptyError bool   // stderr must be empty
	}{
		{name: "no command", args: nil, code: exitUsage, stderr: "usage: latchkey", emptyOut: true},
		{name: "unknown", args: []string{"frobnicate"}, code: exitUsage, stderr: `unknown command "frobnicate"`, emptyOut: true},
		{name: "help", args: []string{"help"}, code: exitOK, stdout: "demo", emptyError: true},
		{name: "-h", args: []string{"-h"}, code: exitOK, stdout: "usage: latchkey", emptyError: true},
		{name: "help demo", args: []string{"help", "demo"}, code: exitOK, stdout: "-buyers-per-instance", emptyError: true},
		{name: "help unknown", args: []string{"help", "nope"}, code: exitUsage, stderr: `unknown command "nope"`},
		{name: "demo -h", args: []string{"demo", "-h"}, code: exitOK, stderr: "-instances"},
		{name: "bad flag", args: []string{"demo", "-nope"}, code: exitUsage, stderr: "flag provided but not defined", emptyOut: true},
		{name: "bad value", args: []string{"demo", "-instances", "0"}, code: exitUsage, stderr: "-instances must be at least 1", emptyOut: true},
		{name: "extra argument", args: []string{"demo", "lock", "now"}, code: exitUsage, stderr: `unexpected argument "now"`, emptyOut: true},
		{name: "unknown demo", args: []string{"demo", "now"}, code: exitUsage, stderr: `unknown demo "now"`, emptyOut: true},
		{name: "help demo lists demos", args: []string{"help", "demo"}, code: exitOK, stdout: `flags of "latchkey demo jobs":`, emptyError: true},
		{name: "demo gate -h", args: []string{"demo", "gate", "-h"}, code: exitOK, stderr: "-callers-per-instance"},
		{name: "demo jobs -h", args: []string{"demo", "jobs", "-h"}, code: exitOK, stderr: "-workers"},
		{name: "name after flags", args: []string{"demo", "-instances", "2", "gate"}, code: exitUsage,
			stderr: `unexpected argument "gate" (a demo's name goes before its flags)`, emptyOut: true},
		{name: "another demo's flag", args: []string{"demo", "gate", "-stock", "3"}, code: exitUsage, stderr: "flag provided but not defined: -stock", emptyOut: true},
		{name: "bad permits", args: []string{"demo", "gate", "-permits", "0"}, code: exitUsage, stderr: "-permits must be at least 1", emptyOut: true},
		{name: "bad jobs instances", args: []string{"demo", "jobs", "-instances", "1"}, code: exitUsage, stderr: "-instances must be at least 2", emptyOut: true},
		{name: "demo gate", args: []string{"demo", "gate", "-instances", "2", "-callers-per-instance", "4", "-permits", "2"}, code: exitOK,
			stdout: "permits available afterwards 2 of 2", emptyError: true},
		{name: "demo jobs", args: []string{"demo", "jobs", "-instances", "2", "-workers", "3"}, code: exitOK,
			stdout: "Await returned: all 3 jobs are done", emptyError: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit status %d, want %d", code, tt.code)
			}
			if !strings.Contains(stdout.String(), tt.stdout) {
				t.Errorf("stdout lacks %q:\n%s", tt.stdout, stdout.String())
			}
			if !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderr, stderr.String())
			}
			if tt.emptyOut && stdout.Len() > 0 {
				t.Errorf("stdout not empty:\n%s", stdout.String())
			}
			if tt.emptyError && stderr.Len() > 0 {
				t.Errorf("stderr not empty:\n%s", stderr.String())
			}
		})
	}
}

// A demo that cannot finish must say so and exit 1, or CI's smoke run would pass it.
func TestRunDemoFailureExitStatus(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "-instances", "1", "-buyers-per-instance", "1", "-stock", "1"},
		{"demo", "gate", "-instances", "1", "-callers-per-instance", "1"},
		{"demo", "jobs", "-instances", "2", "-workers", "1"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var stdout, stderr bytes.Buffer
			if code := run(ctx, args, &stdout, &stderr); code != exitFail {
				t.Errorf("exit status %d, want %d; stderr:\n%s", code, exitFail, stderr.String())
			}
			if !strings.Contains(stderr.String(), "latchkey demo: ") {
				t.Errorf("stderr does not report the failure:\n%s", stderr.String())
			}
		})
	}
}

func TestRunGateDemo(t *testing.T) {
	t.Parallel()
	cfg := fastDemo()
	var out bytes.Buffer
	if err := runGateDemo(t.Context(), &out, cfg); err != nil {
		t.Fatalf("runGateDemo: %v\noutput:\n%s", err, out.String())
	}
	got := out.String()
	_, gated, ok := strings.Cut(got, "3-permit Semaphore ==")
	if !ok {
		t.Fatalf("no semaphore section in output:\n%s", got)
	}
	// runGateDemo fails when the downstream sees more calls at once than there are permits,
	// so a peak above 3 cannot get here; it may be below only if callers came too slowly.
	for _, want := range []string{
		"TrySetPermits(3) on Semaphore \"demo:downstream\" at startup: 1 set the permits,\n1 found them set.",
		"calls 20, downstream peak concurrency ",
		"(it allows 3)",
		"permits available afterwards 3 of 3",
		"All invariants held",
	} {
		if !strings.Contains(gated, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestRunJobsDemo(t *testing.T) {
	t.Parallel()
	cfg := fastDemo()
	cfg.instances = 3
	// The timeline reads best when jobs end further apart than a CountDown takes, which under
	// -race on a busy machine is several ms: 6 workers and the replacement take 0.2 s.
	cfg.workStep = 20 * time.Millisecond
	var out bytes.Buffer
	if err := runJobsDemo(t.Context(), &out, cfg); err != nil {
		t.Fatalf("runJobsDemo: %v\noutput:\n%s", err, out.String())
	}
	got := out.String()
	// Workers 1-6 on clients A, B, C in turn; worker 3 (on C) is killed and replaced on A.
	// Each survivor's Count is read after its CountDown, so it may include others' and is
	// not checked, nor is the order the survivors (and the kill) are reported in.
	for _, want := range []string{
		"client A  worker 1   job done, CountDown; Count now ",
		"client B  worker 2   job done, CountDown; Count now ",
		"client C  worker 3   KILLED half-way through its job: it never counts down\n",
		"client A  worker 4   job done, CountDown; Count now ",
		"client B  worker 5   job done, CountDown; Count now ",
		"client C  worker 6   job done, CountDown; Count now ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	// These in this order: the timeline is the point.
	rest := got
	for _, want := range []string{
		`set CountDownLatch "demo:jobs" with TrySetCount(6)`,
		"(Count = 6)",
		"5 of 6 workers done, Count = 1: the coordinator still waits",
		"client A  worker 3' replaces worker 3",
		"client A  worker 3' job done, CountDown; Count now 0\n",
		"coordinator  Await returned: all 6 jobs are done\n",
		"EXISTS demo:jobs = 0",
		"All invariants held",
	} {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("output lacks %q after the lines before it:\n%s", want, got)
		}
		rest = rest[i+len(want):]
	}
}
