// Package embedredis runs an in-process miniredis whose clock follows real
// time, so key expiry (PX, PEXPIRE, PTTL) behaves the way it does on a real
// Redis server.
//
// Plain miniredis never expires anything on its own: TTLs only shrink when a
// test calls FastForward. A lock library, however, is all about leases that
// run out while nobody is looking, so the demo command and the test harness
// need a server on which waiting actually makes keys disappear.
package embedredis

import (
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// tickInterval is how often the clock moves while no command comes, so that
// keys expire and TIME moves on their own; each command also brings the clock
// up to date before it runs. 5ms is well below the lease times a lock test
// uses, yet cheap enough that the ticker goroutine is negligible next to the
// tests themselves.
const tickInterval = 5 * time.Millisecond

// Server is a running miniredis plus the goroutine that keeps its clock in
// step with real time. Create it with Start and release it with Close.
type Server struct {
	m *miniredis.Miniredis

	clock sync.Mutex // serialises moves of the clock; taken before m's lock, never under it
	last  time.Time  // when the clock was last moved; guarded by clock

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// Start launches a miniredis on a random 127.0.0.1 port and starts advancing
// its clock in real time.
//
// The clock is advanced from a background goroutine rather than with
// miniredis' ClockTTL mode because ClockTTL moves time on every database
// access, so a key could expire halfway through a Lua script. Real Redis
// freezes the clock for the duration of a script, and the lock scripts rely
// on that; a ticker that needs the miniredis lock can only move time between
// commands, which preserves it.
func Start() (*Server, error) {
	m := miniredis.NewMiniRedis()
	// Set the clock before the first client can connect so that TIME and
	// PEXPIREAT are right from the very first command, not only after the
	// first tick.
	start := time.Now()
	m.SetTime(start.UTC())
	if err := m.Start(); err != nil {
		return nil, fmt.Errorf("embedredis: start miniredis: %w", err)
	}
	s := &Server{
		m:    m,
		last: start,
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	// Each command also brings the clock up to date before it runs. The ticker alone lags
	// on a loaded machine, and its next step would then charge a key set meanwhile for time
	// that passed before it was set: a TTL ran out 20 ms early with the ticker starved. A
	// command a script runs finds m locked by the script, and leaves the clock alone: time
	// stands still within a script, as on real Redis.
	m.Server().SetPreHook(func(*server.Peer, string, ...string) bool {
		if m.TryLock() {
			m.Unlock()
			s.advance()
		}
		return false
	})
	go s.tick()
	return s, nil
}

// advance moves the clock to now: TTLs forward by exactly the monotonic time elapsed since
// the previous move, so that no drift accumulates, then TIME.
func (s *Server) advance() {
	s.clock.Lock()
	defer s.clock.Unlock()
	now := time.Now()
	d := now.Sub(s.last)
	if d <= 0 {
		return
	}
	// Forward TTLs before moving TIME: in the gap between the two calls an absolute expiry
	// (PEXPIREAT) is then computed against the older time, which errs towards keeping a key
	// slightly longer, as real Redis' lazy expiry does, rather than dropping it early.
	s.m.FastForward(d)
	s.m.SetTime(now.UTC())
	s.last = now
}

// tick advances the miniredis clock until Close is called, so that keys expire and TIME
// moves while no command comes. A late wake-up (a busy machine, the race detector) is caught
// up on the next step instead of being lost.
func (s *Server) tick() {
	defer close(s.done)
	t := time.NewTicker(tickInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.advance()
	}
}

// Addr returns the host:port the server listens on.
func (s *Server) Addr() string {
	return s.m.Addr()
}

// Miniredis returns the underlying miniredis, for tests that want to inspect
// or manipulate the data set directly.
func (s *Server) Miniredis() *miniredis.Miniredis {
	return s.m
}

// Close stops the clock goroutine, waits for it to exit and shuts the server
// down. It is safe to call more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		s.m.Close()
	})
}
