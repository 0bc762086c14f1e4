package sync

import (
	"context"
	gosync "sync"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/zap"
)

// janitor deletes unlock latches once their unlock has completed, batched and off the
// caller's path: an unlock costs one round trip, and latches do not linger for their whole
// PX. Keys are collected for a short window and deleted in one pipelined round trip, so a
// burst of unlocks wakes nothing per call. A latch the janitor does not get to (queue full,
// client closed) still expires by its PX.
type janitor struct {
	rdb rueidis.Client
	log *zap.Logger

	mu      gosync.Mutex
	pending []string
	armed   bool // a flush is scheduled
	closed  bool
	flushes gosync.WaitGroup
}

const (
	janitorWindow  = 20 * time.Millisecond
	janitorMaxKeys = 8192
	janitorTimeout = 2 * time.Second
)

func newJanitor(rdb rueidis.Client, log *zap.Logger) *janitor {
	return &janitor{rdb: rdb, log: log}
}

// del queues key for deletion without blocking.
func (j *janitor) del(key string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed || len(j.pending) >= janitorMaxKeys {
		return
	}
	j.pending = append(j.pending, key)
	if !j.armed {
		j.armed = true
		j.flushes.Add(1)
		time.AfterFunc(janitorWindow, j.flush)
	}
}

// flush deletes what is pending; it runs on the timer's goroutine.
func (j *janitor) flush() {
	defer j.flushes.Done()
	j.mu.Lock()
	keys := j.pending
	j.pending, j.armed = nil, false
	j.mu.Unlock()
	j.delete(keys)
}

// close deletes what is pending, waits for a scheduled flush, and stops taking keys.
func (j *janitor) close() {
	j.mu.Lock()
	j.closed = true
	keys := j.pending
	j.pending = nil
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
