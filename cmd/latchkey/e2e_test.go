package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	dsync "github.com/latchkey/latchkey/sync"
	"github.com/redis/rueidis"
)

// binary is the latchkey command the end-to-end tests run, built once by TestMain.
var binary string

// topologies are the Cluster and the Sentinel set the tests share (see redistest.Topologies),
// made by TestMain and closed after every test.
var topologies *redistest.Topologies

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "latchkey-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "latchkey")
	build := exec.Command(goTool(), "build", "-o", binary, ".")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build latchkey: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	if topologies, err = redistest.NewTopologies(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if err := topologies.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// goTool is the go command of the toolchain running the tests.
func goTool() string {
	if p := filepath.Join(os.Getenv("GOROOT"), "bin", "go"); os.Getenv("GOROOT") != "" {
		return p
	}
	return "go"
}

// e2eTimeout bounds what one latchkey process may take in a test: not how soon it must be
// done, only when a hung one is given up on. Wide, for a loaded two-CPU machine.
const e2eTimeout = time.Minute

// server starts a real redis-server for one test and returns its URL and a client on it.
func server(t *testing.T) (string, rueidis.Client) {
	t.Helper()
	b := redistest.Redis(t)
	return "redis://" + b.Addr, b.Client(t)
}

// dsyncClient is a dsync Client on rdb for the test's own holders, closed when it ends.
func dsyncClient(t *testing.T, rdb rueidis.Client, opts ...dsync.Option) *dsync.Client {
	t.Helper()
	c, err := dsync.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// result is how a latchkey process ended.
type result struct {
	code           int
	stdout, stderr string
}

// latchkey runs the binary with args against the server at url, in dir when not empty,
// and waits for it.
func latchkey(t *testing.T, url string, args ...string) result {
	t.Helper()
	cmd := latchkeyCmd(t, url, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return result{code: exitCodeOf(t, err), stdout: stdout.String(), stderr: stderr.String()}
}

// latchkeyCmd prepares the binary with args against the server at url, killed when the test's
// bound runs out.
func latchkeyCmd(t *testing.T, url string, args ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), envRedisURL+"="+url)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

func exitCodeOf(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("run latchkey: %v", err)
	return -1
}

// eventually polls cond until it returns nil, failing the test with its last error once
// timeout has passed.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exists reports whether key exists.
func exists(t *testing.T, rdb rueidis.Client, key string) bool {
	t.Helper()
	n, err := rdb.Do(context.Background(), rdb.B().Exists().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// syncBuffer is an io.Writer safe to read while a process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// contains returns a cond for eventually: buf holds want.
func contains(buf *syncBuffer, want string) func() error {
	return func() error {
		if s := buf.String(); !strings.Contains(s, want) {
			return fmt.Errorf("no %q in %q", want, s)
		}
		return nil
	}
}

// subscribed waits until channel has one subscriber.
func subscribed(t *testing.T, rdb rueidis.Client, channel string) {
	t.Helper()
	eventually(t, e2eTimeout, channel+" subscribed", func() error {
		r, err := rdb.Do(context.Background(), rdb.B().PubsubNumsub().Channel(channel).Build()).ToArray()
		if err == nil {
			if n, _ := r[1].AsInt64(); n != 1 {
				err = fmt.Errorf("%d subscribers", n)
			}
		}
		return err
	})
}
