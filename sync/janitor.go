package sync

import (
	"context"
	gosync "sync"
	"time"

	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
	"go.uber.org/zap"
)

// janitor deletes the unlock latches of idle handles.
//
// Each handle has one latch key, which each of its unlocks overwrites with its outcome and
// request ID, so an active handle has one latch and no script spends a call deleting the
// last one. A handle that stays idle for janitorDelay has its latch deleted by the janitor, in
// one pipelined batch with the others, and only if the latch still records the unlock the
// janitor knows of: an unlock that overwrote it meanwhile (whose retry may still need it) is
// never cut short. Sending those deletions as the latches appear would put a command of ours
// beside every caller's, and any concurrent command switches a rueidis connection from
// direct writes to background pipelining for good, which costs a sequential caller two
// goroutine hand-offs per command. A latch the janitor does not get to (client closed in a
// hurry) still expires by its PX.
type janitor struct {
	rdb rueidis.Client
	log *zap.Logger

	mu      gosync.Mutex
	idle    map[*Lock]leftLatch // each handle's latch and the unlock it last recorded
	armed   bool                // a flush is scheduled
	timer   *time.Timer         // the scheduled flush
	closed  bool
	flushes gosync.WaitGroup
}

type leftLatch struct {
	key string
	req string // the request ID of the unlock that wrote it
	at  time.Time
}

const (
	janitorDelay   = time.Second
	janitorTimeout = 2 * time.Second
)

func newJanitor(rdb rueidis.Client, log *zap.Logger) *janitor {
	return &janitor{rdb: rdb, log: log, idle: make(map[*Lock]leftLatch)}
}

// leave records that l's unlock req (may have) written l's latch key.
func (j *janitor) leave(l *Lock, key, req string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return
	}
	j.idle[l] = leftLatch{key: key, req: req, at: time.Now()}
	j.armLocked()
}

func (j *janitor) armLocked() {
	if !j.armed {
		j.armed = true
		j.flushes.Add(1)
		j.timer = time.AfterFunc(janitorDelay, j.flush)
	}
}

// flush deletes the latches of handles idle for janitorDelay; it runs on the timer's
// goroutine and re-arms while latches remain.
func (j *janitor) flush() {
	defer j.flushes.Done()
	j.mu.Lock()
	var gone []leftLatch
	cutoff := time.Now().Add(-janitorDelay)
	for l, left := range j.idle {
		if !left.at.After(cutoff) {
			gone = append(gone, left)
			delete(j.idle, l)
		}
	}
	j.armed = false
	if len(j.idle) > 0 && !j.closed {
		j.armLocked()
	}
	j.mu.Unlock()
	j.delete(gone)
}

// close deletes every latch still known, waits for a scheduled flush, and stops.
func (j *janitor) close() {
	j.mu.Lock()
	j.closed = true
	if j.armed && j.timer.Stop() {
		j.armed = false
		j.flushes.Done() // the flush will not run: this is it
	}
	var gone []leftLatch
	for l, left := range j.idle {
		gone = append(gone, left)
		delete(j.idle, l)
	}
	j.mu.Unlock()
	j.delete(gone)
	j.flushes.Wait()
}

func (j *janitor) delete(latches []leftLatch) {
	if len(latches) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), janitorTimeout)
	defer cancel()
	execs := make([]rueidis.LuaExec, len(latches))
	for i, left := range latches {
		execs[i] = rueidis.LuaExec{Keys: []string{left.key}, Args: []string{left.req}}
	}
	for _, r := range lua.LatchDelete.ExecMulti(ctx, j.rdb, execs...) {
		if err := r.Error(); err != nil {
			j.log.Debug("unlock latch not deleted; it expires by itself", zap.Error(err))
			return
		}
	}
}
