package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// Every command has help with an example, shown on -h and by "latchkey help <command>".
func TestHelpOfEveryCommand(t *testing.T) {
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), []string{"help", c.name}, &stdout, &stderr); code != exitOK {
				t.Fatalf("help %s: exit status %d; stderr:\n%s", c.name, code, stderr.String())
			}
			help := stdout.String()
			for _, want := range []string{"usage: latchkey " + c.name, "--redis", "latchkey " + c.name + " "} {
				if !strings.Contains(help, want) {
					t.Errorf("help lacks %q:\n%s", want, help)
				}
			}
			if c.name != "demo" && !strings.Contains(help, "examples:") {
				t.Errorf("help has no examples:\n%s", help)
			}
		})
	}
	var stdout bytes.Buffer
	run(context.Background(), []string{"help"}, &stdout, &stdout)
	for _, want := range []string{"run", "inspect", "latch", "semaphore", "unlock", "75 not acquired", "76 lease lost"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("latchkey help lacks %q:\n%s", want, stdout.String())
		}
	}
}

// A bad command line exits 2 with a message naming what is wrong, before any connection
// (no Redis runs here).
func TestBadCommandLines(t *testing.T) {
	t.Setenv(envRedisURL, "redis://127.0.0.1:1")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--", "true"}, "give exactly one of --lock, --semaphore, --read and --write"},
		{[]string{"run", "--lock", "a", "--read", "b", "--", "true"}, "give exactly one of"},
		{[]string{"run", "--lock", "a"}, "no command to run"},
		{[]string{"run", "--semaphore", "s", "--", "true"}, "--semaphore needs --permits, at least 1, got 0"},
		{[]string{"run", "--lock", "a", "--permits", "2", "--", "true"}, "--permits goes with --semaphore"},
		{[]string{"run", "--read", "a", "--fair", "--", "true"}, "--fair and --fenced go with --lock"},
		{[]string{"run", "--lock", "a", "--fair", "--fenced", "--", "true"}, "do not go together"},
		{[]string{"run", "--lock", "a", "--wait", "soon", "--", "true"}, `invalid value "soon" for flag -wait: not a duration`},
		{[]string{"run", "--lock", "a", "--wait", "-1s", "--", "true"}, "must not be negative"},
		{[]string{"run", "--lock", "a", "--lease", "0s", "--", "true"}, `invalid value "0s" for flag -lease: must be above zero`},
		{[]string{"run", "--lock", "a", "--lease", "1ms", "--", "true"}, "--lease must be at least 3ms"},
		{[]string{"run", "--lock", "a", "--redis", "http://x", "--", "true"}, `--redis "http://x": redis: invalid URL scheme: http`},
		{[]string{"inspect"}, "give at least one NAME"},
		{[]string{"inspect", "--interval", "0s", "a"}, "must be above zero"},
		{[]string{"latch"}, "give a NAME and what to do"},
		{[]string{"latch", "l", "open"}, `unknown latch operation "open"`},
		{[]string{"latch", "l", "set"}, "set takes the count N"},
		{[]string{"latch", "l", "set", "0"}, `the count N must be a whole number of at least 1, got "0"`},
		{[]string{"latch", "l", "count-down", "--timeout", "1s"}, "--timeout goes with await"},
		{[]string{"latch", "l", "await", "now"}, `await takes no argument, got "now"`},
		{[]string{"semaphore", "s", "set", "-1"}, "flag provided but not defined: -1"},
		{[]string{"semaphore", "s", "set", "--", "-1"}, "set: N must not be negative, got -1"},
		{[]string{"semaphore", "s", "add", "x"}, `add: N must be a whole number, got "x"`},
		{[]string{"semaphore", "s", "drain"}, `unknown semaphore operation "drain"`},
		{[]string{"unlock", "a"}, "only --force unlocking is possible"},
		{[]string{"unlock", "--force"}, "give one lock NAME"},
		{[]string{"inspect", "a", "--nope"}, "flag provided but not defined: -nope"},
		{[]string{"demo", "--redis", "ftp://x"}, `--redis "ftp://x"`},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), tt.args, &stdout, &stderr); code != exitUsage {
				t.Errorf("exit status %d, want %d; stderr:\n%s", code, exitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr lacks %q:\n%s", tt.want, stderr.String())
			}
		})
	}
}

// An unreachable server is latchkey's own failure: exit 1, saying where it tried.
func TestUnreachableRedis(t *testing.T) {
	t.Setenv(envRedisURL, "redis://127.0.0.1:1")
	for _, args := range [][]string{
		{"run", "--lock", "a", "--", "true"},
		{"inspect", "a"},
		{"latch", "l", "count-down"},
		{"semaphore", "s", "available"},
		{"unlock", "--force", "--yes", "a"},
	} {
		t.Run(args[0], func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), args, &stdout, &stderr); code != exitFail {
				t.Errorf("exit status %d, want %d; stderr:\n%s", code, exitFail, stderr.String())
			}
			if !strings.Contains(stderr.String(), "127.0.0.1:1") {
				t.Errorf("stderr does not name the server:\n%s", stderr.String())
			}
		})
	}
}
