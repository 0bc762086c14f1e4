package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// fastDemo is the demo scaled down to about a second; the proportions that make each
// section meaningful are kept (the lock is held over 3x its watchdog timeout).
func fastDemo() demoConfig {
	cfg := defaultDemoConfig()
	cfg.instances = 2
	cfg.buyers = 10
	cfg.stock = 8
	cfg.wakeHold = 100 * time.Millisecond
	cfg.leaseTimeout = 150 * time.Millisecond
	cfg.leaseHold = 500 * time.Millisecond
	cfg.leaseSamples = 3
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
		"message \"0\" published on redisson_lock__channel:{demo:wake} (Redisson's unlock message, for Java waiters; no latchkey Client listens there while one holds)",
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
		{name: "extra argument", args: []string{"demo", "now"}, code: exitUsage, stderr: `unexpected argument "now"`, emptyOut: true},
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
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"demo", "-instances", "1", "-buyers-per-instance", "1", "-stock", "1"}, &stdout, &stderr); code != exitFail {
		t.Errorf("exit status %d, want %d; stderr:\n%s", code, exitFail, stderr.String())
	}
	if !strings.Contains(stderr.String(), "latchkey demo: ") {
		t.Errorf("stderr does not report the failure:\n%s", stderr.String())
	}
}
