package sync

import (
	"context"
	"runtime"
	gosync "sync"
	"time"
	"weak"

	"github.com/redis/rueidis"
	"go.uber.org/zap"
)

// janitor deletes the unlock latches of handles that are gone.
//
// Each handle has one latch key, the high-water mark of its unlock requests, which each of
// its unlocks overwrites. The mark is what makes a late duplicate of an earlier unlock
// change nothing, so it must outlive every hold the handle may still take: it is deleted
// only when the handle has been garbage-collected (nothing can acquire as its owner any
// more) or its Client is closed, and otherwise expires by its PX. Deletions go out in one
// pipelined batch after janitorDelay. Sending them one by one as handles go would put a
// command of ours beside every caller's, and any concurrent command switches a rueidis
// connection from direct writes to background pipelining for good, which costs a
// sequential caller two goroutine hand-offs per command.
type janitor struct {
	rdb rueidis.Client
	log *zap.Logger

	mu      gosync.Mutex
	live    map[string]weak.Pointer[Lock] // latch keys of handles not yet collected
	pinned  map[string]struct{}           // latches guarding requests of unknown outcome
	gone    []string                      // latch keys of collected handles, deleted at the next flush
	armed   bool                          // a flush is scheduled
	timer   *time.Timer                   // the scheduled flush
	closed  bool
	flushes gosync.WaitGroup
}

const (
	janitorDelay   = time.Second
	janitorTimeout = 2 * time.Second
)

func newJanitor(rdb rueidis.Client, log *zap.Logger) *janitor {
	return &janitor{rdb: rdb, log: log, live: make(map[string]weak.Pointer[Lock]), pinned: make(map[string]struct{})}
}

// track takes charge of l's latch key, made at its first unlock: it is deleted once l has
// been garbage-collected, or at close.
func (j *janitor) track(l *Lock, key string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return
	}
	j.live[key] = weak.Make(l)
	runtime.AddCleanup(l, j.collected, key)
}

// pin keeps key from being deleted before its PX: it guards requests whose outcome is
// unknown and that may still reach Redis — even after their handle is gone, since a late
// hand-off or settlement acts on another owner's hold.
func (j *janitor) pin(key string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.pinned[key] = struct{}{}
	delete(j.live, key)
}

// collected runs when a handle with a latch has been garbage-collected.
func (j *janitor) collected(key string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.live, key)
	if _, ok := j.pinned[key]; ok {
		delete(j.pinned, key) // it expires by its PX
		return
	}
	if j.closed {
		return
	}
	j.gone = append(j.gone, key)
	if !j.armed {
		j.armed = true
		j.flushes.Add(1)
		j.timer = time.AfterFunc(janitorDelay, j.flush)
	}
}

// flush deletes the latches of collected handles; it runs on the timer's goroutine.
func (j *janitor) flush() {
	defer j.flushes.Done()
	j.mu.Lock()
	keys := j.gone
	j.gone = nil
	j.armed = false
	j.mu.Unlock()
	j.delete(keys)
}

// close deletes the latches still known — the Client's owners take no hold after it, so no
// late duplicate can matter — except those of handles with an unlock still running (it may
// yet retry, and needs its latch; it expires by its PX). Then it waits for a scheduled
// flush, and stops. Call it after the Client is marked closed, so that no unlock starts.
func (j *janitor) close() {
	j.mu.Lock()
	j.closed = true
	if j.armed && j.timer.Stop() {
		j.armed = false
		j.flushes.Done() // the flush will not run: this is it
	}
	keys := j.gone
	j.gone = nil
	var idle []*Lock
	for key, wp := range j.live {
		delete(j.live, key)
		if l := wp.Value(); l != nil {
			if !l.op.TryLock() {
				continue
			}
			idle = append(idle, l)
		}
		keys = append(keys, key)
	}
	j.mu.Unlock()
	j.delete(keys)
	for _, l := range idle {
		l.op.Unlock()
	}
	j.flushes.Wait()
}

func (j *janitor) delete(keys []string) {
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), janitorTimeout)
	defer cancel()
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = j.rdb.B().Del().Key(k).Build()
	}
	for _, r := range j.rdb.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			j.log.Debug("unlock latch not deleted; it expires by itself", zap.Error(err))
			return
		}
	}
}
