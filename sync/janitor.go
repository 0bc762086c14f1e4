package sync

import (
	"context"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/zap"
)

// janitor deletes unlock latches once their unlock has completed, batched and off the
// caller's path: an unlock costs one round trip, and latches do not linger for their whole
// PX. A latch the janitor cannot take (queue full, client closing) still expires by its PX.
type janitor struct {
	rdb  rueidis.Client
	log  *zap.Logger
	keys chan string
	stop chan struct{}
	done chan struct{}
}

const (
	janitorQueue = 4096
	janitorBatch = 256
)

func newJanitor(rdb rueidis.Client, log *zap.Logger) *janitor {
	j := &janitor{
		rdb:  rdb,
		log:  log,
		keys: make(chan string, janitorQueue),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	go j.run()
	return j
}

// del queues key for deletion without blocking.
func (j *janitor) del(key string) {
	select {
	case <-j.stop:
	case j.keys <- key:
	default:
	}
}

// close deletes what is queued (bounded by a short timeout) and stops.
func (j *janitor) close() {
	close(j.stop)
	<-j.done
}

func (j *janitor) run() {
	defer close(j.done)
	batch := make([]string, 0, janitorBatch)
	for {
		select {
		case key := <-j.keys:
			batch = append(batch[:0], key)
		case <-j.stop:
			j.drain(batch[:0])
			return
		}
		// Take what else is queued, so a burst of unlocks costs one pipelined round trip.
		for len(batch) < janitorBatch {
			select {
			case key := <-j.keys:
				batch = append(batch, key)
				continue
			default:
			}
			break
		}
		j.flush(batch)
	}
}

func (j *janitor) drain(batch []string) {
	for {
		select {
		case key := <-j.keys:
			if batch = append(batch, key); len(batch) == janitorBatch {
				j.flush(batch)
				batch = batch[:0]
			}
		default:
			if len(batch) > 0 {
				j.flush(batch)
			}
			return
		}
	}
}

func (j *janitor) flush(keys []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
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
