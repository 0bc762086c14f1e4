package sync

import (
	"context"
	gosync "sync"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/zap"
)

// janitor deletes the unlock latches that their handles' next scripts do not.
//
// A latch is done with once its unlock has completed. The handle's next acquire or release
// script deletes it (it is in the lock's slot, so the script can declare it), which costs no
// command of its own. Only a handle that stays idle leaves its latch to the janitor, which
// deletes such latches in one pipelined batch after janitorDelay. Sending those DELs as the
// latches appear would put a command of ours beside every caller's, and any concurrent
// command switches a rueidis connection from direct writes to background pipelining for
// good, which costs a sequential caller two goroutine hand-offs per command. A latch the
// janitor does not get to (client closed in a hurry) still expires by its PX.
type janitor struct {
	rdb rueidis.Client
	log *zap.Logger

	mu      gosync.Mutex
	idle    map[*Lock]leftLatch // the latest latch of each handle, until its next script
	stray   []string            // latches of failed unlocks: deleted at the next flush
	armed   bool                // a flush is scheduled
	timer   *time.Timer         // the scheduled flush
	closed  bool
	flushes gosync.WaitGroup
}

type leftLatch struct {
	key string
	at  time.Time
}

const (
	janitorDelay   = time.Second
	janitorMaxKeys = 8192
	janitorTimeout = 2 * time.Second
)

func newJanitor(rdb rueidis.Client, log *zap.Logger) *janitor {
	return &janitor{rdb: rdb, log: log, idle: make(map[*Lock]leftLatch)}
}

// leave records latch as l's latest; l's next script is expected to delete it.
func (j *janitor) leave(l *Lock, latch string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return
	}
	if old, ok := j.idle[l]; ok {
		j.stray = append(j.stray, old.key) // its script failed to carry it: delete it here
	}
	j.idle[l] = leftLatch{key: latch, at: time.Now()}
	j.armLocked()
}

// taken records that l's script deleted l's latch.
func (j *janitor) taken(l *Lock) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.idle, l)
}

// del queues a latch for the next flush.
func (j *janitor) del(latch string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed || len(j.stray) >= janitorMaxKeys {
		return
	}
	j.stray = append(j.stray, latch)
	j.armLocked()
}

func (j *janitor) armLocked() {
	if !j.armed {
		j.armed = true
		j.flushes.Add(1)
		j.timer = time.AfterFunc(janitorDelay, j.flush)
	}
}

// flush deletes the stray latches and those of handles idle for janitorDelay; it runs on the
// timer's goroutine and re-arms while latches remain.
func (j *janitor) flush() {
	defer j.flushes.Done()
	j.mu.Lock()
	keys := j.stray
	j.stray = nil
	cutoff := time.Now().Add(-janitorDelay)
	for l, left := range j.idle {
		if !left.at.After(cutoff) {
			keys = append(keys, left.key)
			delete(j.idle, l)
		}
	}
	j.armed = false
	if len(j.idle) > 0 && !j.closed {
		j.armLocked()
	}
	j.mu.Unlock()
	j.delete(keys)
}

// close deletes every latch still known, waits for a scheduled flush, and stops.
func (j *janitor) close() {
	j.mu.Lock()
	j.closed = true
	if j.armed && j.timer.Stop() {
		j.armed = false
		j.flushes.Done() // the flush will not run: this is it
	}
	keys := j.stray
	j.stray = nil
	for l, left := range j.idle {
		keys = append(keys, left.key)
		delete(j.idle, l)
	}
	j.mu.Unlock()
	j.delete(keys)
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
