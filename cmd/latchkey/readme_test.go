package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/rueidis"
)

// readmeCommands returns the latchkey command lines of the README's "Command line" section,
// without their comments, and the crontab's environment lines.
func readmeCommands(t *testing.T) (lines, env []string) {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Command line\n")
	if !ok {
		t.Fatal("README.md has no Command line section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	inCode := false
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
			continue
		}
		if !inCode || strings.HasPrefix(line, "#") {
			continue
		}
		if fields := strings.Fields(line); len(fields) > 5 && fields[5] == "latchkey" { // a crontab entry
			line = strings.Join(fields[5:], " ")
		}
		if name, _, ok := strings.Cut(line, "="); ok && !strings.Contains(name, " ") {
			env = append(env, line)
			continue
		}
		line, _, _ = strings.Cut(line, "#")
		lines = append(lines, strings.TrimSpace(line))
	}
	return lines, env
}

// Every command line the README shows is one latchkey accepts: run against a server that is
// not there, each fails to connect (exit 1), where a bad command line would exit 2.
func TestReadmeCommandLines(t *testing.T) {
	t.Parallel()
	lines, env := readmeCommands(t)
	if len(lines) < 8 || len(env) != 1 {
		t.Fatalf("found %d command lines and %d environment lines in the README: %q %q", len(lines), len(env), lines, env)
	}
	for _, e := range env {
		name, url, _ := strings.Cut(e, "=")
		if name != envRedisURL {
			t.Errorf("crontab sets %s, want %s", name, envRedisURL)
		}
		if _, err := rueidis.ParseURL(url); err != nil {
			t.Errorf("crontab's %s: %v", name, err)
		}
	}
	path := filepath.Dir(binary) + string(os.PathListSeparator) + os.Getenv("PATH")
	for _, line := range lines {
		t.Run(line, func(t *testing.T) {
			if !strings.HasPrefix(line, "latchkey ") {
				t.Fatalf("not a latchkey command line: %q", line)
			}
			cmd := exec.Command("sh", "-c", line)
			cmd.Env = append(os.Environ(), "PATH="+path, envRedisURL+"=redis://127.0.0.1:1")
			out, err := cmd.CombinedOutput()
			if code := exitCodeOf(t, err); code != exitFail || !strings.Contains(string(out), "connect to Redis at [127.0.0.1:1]") {
				t.Errorf("exit status %d, want %d for a server not there; output:\n%s", code, exitFail, out)
			}
		})
	}
}

// The examples in every command's help are command lines latchkey accepts, as the README's.
func TestHelpExamplesParse(t *testing.T) {
	t.Parallel()
	path := filepath.Dir(binary) + string(os.PathListSeparator) + os.Getenv("PATH")
	for _, s := range []spec{runSpec(), inspectSpec(), latchSpec(), semaphoreSpec(), unlockSpec()} {
		for _, line := range s.examples {
			// The command itself, without what the shell does with its outcome.
			for _, sep := range []string{"  #", " | ", " && "} {
				line, _, _ = strings.Cut(line, sep)
			}
			line = strings.TrimSpace(line)
			t.Run(line, func(t *testing.T) {
				cmd := exec.Command("sh", "-c", line)
				cmd.Env = append(os.Environ(), "PATH="+path, envRedisURL+"=redis://127.0.0.1:1")
				out, err := cmd.CombinedOutput()
				if code := exitCodeOf(t, err); code != exitFail || !strings.Contains(string(out), "connect to Redis at [127.0.0.1:1]") {
					t.Errorf("exit status %d, want %d for a server not there; output:\n%s", code, exitFail, out)
				}
			})
		}
	}
}
