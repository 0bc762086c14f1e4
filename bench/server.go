package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// server is the Redis every contender runs against, started here unless -redis names one.
type server struct {
	addr  string
	admin rueidis.Client
	cmd   *exec.Cmd
	dir   string
}

// startServer starts a redis-server on a free loopback port, with args besides the defaults.
func startServer(args ...string) (*server, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("no -redis given and no redis-server on PATH: %w", err)
	}
	dir, err := os.MkdirTemp("", "latchkey-bench-")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", dir, "--protected-mode", "no")
	cmd.Args = append(cmd.Args, args...)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, dir: dir}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err = s.connect(); err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.close()
			return nil, fmt.Errorf("redis-server on %s not ready: %w", s.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *server) connect() error {
	admin, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.addr}, DisableCache: true})
	if err != nil {
		return err
	}
	if err := admin.Do(context.Background(), admin.B().Ping().Build()).Error(); err != nil {
		admin.Close()
		return err
	}
	s.admin = admin
	return nil
}

func (s *server) close() {
	if s.admin != nil {
		s.admin.Close()
	}
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		os.RemoveAll(s.dir)
	}
}

// cpu returns the server's user+system CPU time so far (INFO cpu).
func (s *server) cpu(ctx context.Context) (time.Duration, error) {
	info, err := s.admin.Do(ctx, s.admin.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		return 0, err
	}
	var total float64
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu %s=%q: %w", k, v, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// pubsubClients counts the server's subscriber connections (CLIENT LIST TYPE pubsub).
func (s *server) pubsubClients(ctx context.Context) (int, error) {
	list, err := s.admin.Do(ctx, s.admin.B().ClientList().TypePubsub().Build()).ToString()
	if err != nil {
		return 0, err
	}
	return strings.Count(list, "\n"), nil
}

func (s *server) flush(ctx context.Context) error {
	return s.admin.Do(ctx, s.admin.B().Flushall().Build()).Error()
}

// peakRSS is this process's peak resident set (VmHWM), in bytes.
func peakRSS() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/self/status")
}

// commandStat is one command's figure from INFO commandstats.
type commandStat struct {
	name  string // as INFO gives it, a subcommand after a bar: "config|resetstat"
	value float64
}

// commandStats returns field (calls, usec, ...) of every command in INFO commandstats, in
// the order given.
func commandStats(stats, field string) []commandStat {
	var out []commandStat
	for _, line := range strings.Split(stats, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, field+"="); ok {
				n, _ := strconv.ParseFloat(v, 64)
				out = append(out, commandStat{strings.TrimPrefix(name, "cmdstat_"), n})
			}
		}
	}
	return out
}

// uncounted are the commands cmds/acq leaves out: connection upkeep (HELLO, CLIENT, PING),
// subscriptions, which a client holds rather than sends per acquisition, and this benchmark's
// own readings (INFO, CONFIG).
var uncounted = map[string]bool{
	"hello": true, "client": true, "ping": true, "info": true, "config": true,
	"subscribe": true, "unsubscribe": true, "psubscribe": true, "punsubscribe": true,
	"ssubscribe": true, "sunsubscribe": true,
}

// countedCalls sums the calls of every command in INFO commandstats but the uncounted ones.
// Redis counts a command a script runs as a call of its own, besides the script's.
func countedCalls(stats string) int64 {
	var n float64
	for _, c := range commandStats(stats, "calls") {
		if cmd, _, _ := strings.Cut(c.name, "|"); !uncounted[cmd] {
			n += c.value
		}
	}
	return int64(n)
}

// callsPer summarises INFO commandstats as calls per acquisition of each command.
func callsPer(stats string, acquisitions int64) string {
	var b strings.Builder
	if acquisitions > 0 {
		for _, c := range commandStats(stats, "calls") {
			fmt.Fprintf(&b, " %s %.2f", c.name, c.value/float64(acquisitions))
		}
	}
	return b.String()
}

// usecPer summarises INFO commandstats as server µs per cycle of each command, and in all.
func usecPer(stats string, cycles int64) string {
	if cycles == 0 {
		return " (total 0.00)"
	}
	var b strings.Builder
	var total float64
	for _, c := range commandStats(stats, "usec") {
		total += c.value
		if c.value/float64(cycles) >= 0.05 {
			fmt.Fprintf(&b, " %s %.2f", c.name, c.value/float64(cycles))
		}
	}
	fmt.Fprintf(&b, " (total %.2f)", total/float64(cycles))
	return b.String()
}
