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

// janitor deletes the unlock latches of owners that are gone.
//
// Each owner has one latch key, the high-water mark of its numbered requests, which each of
// them overwrites. The mark is what makes a late duplicate of an earlier release change
// nothing, so it must outlive every hold the owner may still take: it is deleted only when
// the owner has been garbage-collected (it takes no hold any more; a late run of an acquire
// could still add one, which lapses with its lease) or its Client is closed, and otherwise expires by its PX, 5 minutes after the owner's last release (the
// latches of a killed process stay that long). Deletions go out in one
// pipelined batch after janitorDelay. Sending them one by one as handles go would put a
// command of ours beside every caller's, and any concurrent command switches a rueidis
// connection from direct writes to background pipelining for good, which costs a
// sequential caller two goroutine hand-offs per command.
type janitor struct {
	rdb rueidis.Client
	log *zap.Logger

	mu      gosync.Mutex
	live    map[string]weak.Pointer[owner] // latch keys of owners not yet collected
	gone    []string                       // latch keys of collected owners, deleted at the next flush
	armed   bool                           // a flush is scheduled
	timer   *time.Timer                    // the scheduled flush
	closed  bool
	flushes gosync.WaitGroup
}

const (
	janitorDelay   = time.Second
	janitorTimeout = 2 * time.Second
)

func newJanitor(rdb rueidis.Client, log *zap.Logger) *janitor {
	return &janitor{rdb: rdb, log: log, live: make(map[string]weak.Pointer[owner])}
}

// track takes charge of o's latch key, made at its first numbered request: it is deleted
// once o has been garbage-collected, or at close.
func (j *janitor) track(o *owner) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return
	}
	j.live[o.latch] = weak.Make(o)
	runtime.AddCleanup(o, j.collected, o.latch)
}

// collected runs when an owner with a latch has been garbage-collected.
func (j *janitor) collected(key string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.live, key)
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
// late duplicate can matter — except those of owners with a request still running (it may
// yet repeat, and needs its latch; it expires by its PX). Then it waits for a scheduled
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
	var idle []*owner
	for key, wp := range j.live {
		delete(j.live, key)
		if o := wp.Value(); o != nil {
			if !o.tryLock() {
				continue
			}
			idle = append(idle, o)
		}
		keys = append(keys, key)
	}
	j.mu.Unlock()
	j.delete(keys)
	for _, o := range idle {
		o.unlock()
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
