package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	gosync "sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	dsync "github.com/latchkey/latchkey/sync"
	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// A contender is one lock library under test. open connects a session to the server at
// addr; every worker of a scenario takes its own mutex from the session, as a service's
// request handlers would.
type contender struct {
	name string
	peer bool   // a library latchkey is compared against (not latchkey itself)
	note string // why the row has no figures, when open is nil
	// pattern: one of latchkey's handle patterns (a handle per request, one shared), shown in
	// the tables; the charts compare libraries.
	pattern bool
	open    func(addr string) (session, error)
}

type session interface {
	mutex(key string) mutex
	close()
}

type mutex interface {
	lock(ctx context.Context) error
	unlock(ctx context.Context) error
}

// goRedisPoolSize gives the go-redis based peers a connection per worker, so that their pool
// is never what limits them.
const goRedisPoolSize = 128

func contenders() []contender {
	return []contender{
		{name: "latchkey", open: openLatchkey(false)},
		{name: "latchkey fair", open: openLatchkey(true)},
		{name: "latchkey per request", pattern: true, open: openLatchkeyPattern(false, perRequest)},
		{name: "latchkey shared", pattern: true, open: openLatchkeyPattern(false, shared)},
		{name: "latchkey fair per request", pattern: true, open: openLatchkeyPattern(true, perRequest)},
		{name: "latchkey fair shared", pattern: true, open: openLatchkeyPattern(true, shared)},
		{name: "redsync", peer: true, open: openRedsync},
		{name: "redislock 10ms", peer: true, open: openRedislock(10 * time.Millisecond)},
		{name: "redislock 100ms", peer: true, open: openRedislock(100 * time.Millisecond)},
		{name: "rueidislock", peer: true, open: openRueidislock},
		{name: "naive", peer: true, open: openNaive},
	}
}

// latchkey: one dsync.Client per session, one handle per worker: a Lock, or with fair a
// FairLock. The pattern variants: a fresh handle per acquisition (per request), or one handle
// per session that all its workers share (shared), as a service's handlers would.

type latchkeySession struct {
	rdb     rueidis.Client
	c       *dsync.Client
	fair    bool
	pattern handlePattern

	mu      gosync.Mutex
	handles map[string]latchkeyMutex // shared: the session's one handle per key
}

// handlePattern is how a session's workers get their lock handles.
type handlePattern int

const (
	perWorker  handlePattern = iota // one handle per worker, kept
	perRequest                      // a fresh handle per acquisition
	shared                          // one handle per session, shared by its workers
)

func openLatchkey(fair bool) func(string) (session, error) {
	return func(addr string) (session, error) {
		rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			return nil, err
		}
		c, err := dsync.New(rdb)
		if err != nil {
			rdb.Close()
			return nil, err
		}
		return &latchkeySession{rdb: rdb, c: c, fair: fair}, nil
	}
}

func (s *latchkeySession) mutex(key string) mutex {
	switch s.pattern {
	case perRequest:
		return &freshMutex{s: s, key: key}
	case shared:
		s.mu.Lock()
		defer s.mu.Unlock()
		m, ok := s.handles[key]
		if !ok {
			m = s.handle(key)
			s.handles[key] = m
		}
		return m
	}
	return s.handle(key)
}

func (s *latchkeySession) handle(key string) latchkeyMutex {
	if s.fair {
		return latchkeyMutex{s.c.FairLock(key)}
	}
	return latchkeyMutex{s.c.Lock(key)}
}

func openLatchkeyPattern(fair bool, p handlePattern) func(string) (session, error) {
	return func(addr string) (session, error) {
		s, err := openLatchkey(fair)(addr)
		if err != nil {
			return nil, err
		}
		ls := s.(*latchkeySession)
		ls.pattern, ls.handles = p, make(map[string]latchkeyMutex)
		return ls, nil
	}
}

// freshMutex makes a new handle for each acquisition, and unlocks through it.
type freshMutex struct {
	s   *latchkeySession
	key string
	cur latchkeyMutex
}

func (m *freshMutex) lock(ctx context.Context) error {
	m.cur = m.s.handle(m.key)
	return m.cur.lock(ctx)
}
func (m *freshMutex) unlock(ctx context.Context) error { return m.cur.unlock(ctx) }
func (s *latchkeySession) close()                      { s.c.Close(); s.rdb.Close() }

// latchkeyMutex is a *dsync.Lock or a *dsync.FairLock.
type latchkeyMutex struct {
	l interface {
		Lock(ctx context.Context, opts ...dsync.LockOption) error
		Unlock(ctx context.Context) error
	}
}

func (m latchkeyMutex) lock(ctx context.Context) error   { return m.l.Lock(ctx) }
func (m latchkeyMutex) unlock(ctx context.Context) error { return m.l.Unlock(ctx) }

// redsync v4 on a go-redis v9 pool: practically unlimited tries, its default retry delay
// (a random 50–250 ms).

type redsyncSession struct {
	rdb goredislib.UniversalClient
	rs  *redsync.Redsync
}

func openRedsync(addr string) (session, error) {
	rdb := goredislib.NewClient(&goredislib.Options{Addr: addr, PoolSize: goRedisPoolSize})
	return &redsyncSession{rdb: rdb, rs: redsync.New(goredis.NewPool(rdb))}, nil
}

func (s *redsyncSession) mutex(key string) mutex {
	return redsyncMutex{s.rs.NewMutex(key, redsync.WithTries(1<<30))}
}
func (s *redsyncSession) close() { s.rdb.Close() }

type redsyncMutex struct{ m *redsync.Mutex }

func (m redsyncMutex) lock(ctx context.Context) error { return m.m.LockContext(ctx) }
func (m redsyncMutex) unlock(ctx context.Context) error {
	ok, err := m.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock found the lock not held")
	}
	return err
}

// bsm/redislock with linear backoff.

type redislockSession struct {
	rdb     *goredislib.Client
	c       *redislock.Client
	backoff time.Duration
}

func openRedislock(backoff time.Duration) func(string) (session, error) {
	return func(addr string) (session, error) {
		rdb := goredislib.NewClient(&goredislib.Options{Addr: addr, PoolSize: goRedisPoolSize})
		return &redislockSession{rdb: rdb, c: redislock.New(rdb), backoff: backoff}, nil
	}
}

func (s *redislockSession) mutex(key string) mutex { return &redislockMutex{s: s, key: key} }
func (s *redislockSession) close()                 { s.rdb.Close() }

type redislockMutex struct {
	s    *redislockSession
	key  string
	held *redislock.Lock
}

// peerLease is the lease peers without a watchdog take: far longer than any hold here.
const peerLease = 30 * time.Second

func (m *redislockMutex) lock(ctx context.Context) error {
	l, err := m.s.c.Obtain(ctx, m.key, peerLease, &redislock.Options{RetryStrategy: redislock.LinearBackoff(m.s.backoff)})
	m.held = l
	return err
}

func (m *redislockMutex) unlock(ctx context.Context) error { return m.held.Release(ctx) }

// rueidislock: one key per lock (KeyMajority 1), NOLOOP tracking; waiters are woken by
// client-side-caching invalidations.

type rueidisLockSession struct{ l rueidislock.Locker }

func openRueidislock(addr string) (session, error) {
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:    1,
		NoLoopTracking: true,
	})
	if err != nil {
		return nil, err
	}
	return &rueidisLockSession{l: l}, nil
}

func (s *rueidisLockSession) mutex(key string) mutex { return &rueidisMutex{l: s.l, key: key} }
func (s *rueidisLockSession) close()                 { s.l.Close() }

type rueidisMutex struct {
	l       rueidislock.Locker
	key     string
	release context.CancelFunc
}

// lock waits while ctx lives, but holds past its end: rueidislock ties a hold to the context
// it was asked with, and a worker inside when the window closes must stay inside until its
// release, as every other library's does, or the next holder overlaps it.
func (m *rueidisMutex) lock(ctx context.Context) error {
	holdCtx, drop := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, drop)
	_, release, err := m.l.WithContext(holdCtx, m.key)
	if !stop() { // ctx ended while waiting: any hold just taken is dropped with holdCtx
		return ctx.Err()
	}
	if err != nil {
		drop()
		return err
	}
	m.release = func() { release(); drop() }
	return nil
}

func (m *rueidisMutex) unlock(context.Context) error { m.release(); return nil }

// naive: the algorithm of the classic write-ups — SET NX PX with a random token, retry every
// 50 ms, release by a compare-and-delete script.

type naiveSession struct {
	rdb     rueidis.Client
	release *rueidis.Lua
}

func openNaive(addr string) (session, error) {
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	release := rueidis.NewLuaScript(`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`)
	return &naiveSession{rdb: rdb, release: release}, nil
}

func (s *naiveSession) mutex(key string) mutex { return &naiveMutex{s: s, key: key} }
func (s *naiveSession) close()                 { s.rdb.Close() }

type naiveMutex struct {
	s     *naiveSession
	key   string
	token string
}

const naiveRetry = 50 * time.Millisecond

// retryNaively is the naive contenders' wait: it calls try until try succeeds or fails,
// naiveRetry apart, and returns try's error, or ctx's once ctx ends between tries. One timer
// serves every pause, so a long wait costs no more than a short one.
func retryNaively(ctx context.Context, try func() (done bool, err error)) error {
	var timer *time.Timer
	for {
		if done, err := try(); done || err != nil {
			return err
		}
		if timer == nil {
			timer = time.NewTimer(naiveRetry)
			defer timer.Stop()
		} else {
			timer.Reset(naiveRetry)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// lock sets the key to a fresh token with SET NX until the SET takes, as the simplest Redis
// lock does, with no queue and no wake-up.
func (m *naiveMutex) lock(ctx context.Context) error {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	m.token = hex.EncodeToString(b[:])
	return retryNaively(ctx, func() (bool, error) {
		rdb := m.s.rdb
		err := rdb.Do(ctx, rdb.B().Set().Key(m.key).Value(m.token).Nx().Px(peerLease).Build()).Error()
		if rueidis.IsRedisNil(err) {
			return false, nil // held by another: try again
		}
		return err == nil, err
	})
}

func (m *naiveMutex) unlock(ctx context.Context) error {
	n, err := m.s.release.Exec(ctx, m.s.rdb, []string{m.key}, []string{m.token}).AsInt64()
	if err == nil && n != 1 {
		err = fmt.Errorf("naive: unlock found %q not held", m.key)
	}
	return err
}
