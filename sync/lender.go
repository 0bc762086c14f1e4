package sync

import (
	"context"
	gosync "sync"
	"time"

	"go.uber.org/zap"
)

// ownerLinger is how long an idle owner is kept for the next acquisition of its name: at
// least this, at most twice this after its last use. Kept, its unlock latch and (for a fair
// lock) its channel's subscription serve the next holder, so a handle made per request costs
// Redis no more than a reused one.
const ownerLinger = 30 * time.Second

// A lender keeps a Client's idle owners of lock handles, by handle kind and name, for the
// handles that take each hold through an owner of its own: every lock handle not made
// Reentrant. An owner is lent to one acquisition at a time and comes back when it holds
// nothing and has no request of unknown outcome. Names not used for a linger period are
// dropped, and their owners' latches deleted once collected (see janitor).
type lender struct {
	mu     gosync.Mutex
	idle   map[ownerKey][]*holder
	used   map[ownerKey]bool // lent or returned since the last sweep
	timer  *time.Timer       // the next sweep, while anything is idle
	closed bool              // owners returned from now on are dropped
}

// An ownerKey is the kind of handle (its what, and side) and the name an idle owner serves.
type ownerKey struct{ kind, name string }

// take returns an idle owner of key, the one returned last, or false if there is none.
func (l *lender) take(key ownerKey) (*holder, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	os := l.idle[key]
	if len(os) == 0 {
		return nil, false
	}
	o := os[len(os)-1]
	os[len(os)-1] = nil
	l.idle[key] = os[:len(os)-1]
	l.used[key] = true
	return o, true
}

// put returns an idle owner of key.
func (l *lender) put(key ownerKey, o *holder) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if l.idle == nil {
		l.idle, l.used = make(map[ownerKey][]*holder), make(map[ownerKey]bool)
	}
	l.idle[key] = append(l.idle[key], o)
	l.used[key] = true
	if l.timer == nil {
		l.timer = time.AfterFunc(ownerLinger, l.sweep)
	}
}

// sweep drops the owners of names neither lent nor returned since the previous sweep.
func (l *lender) sweep() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for key := range l.idle {
		if !l.used[key] {
			delete(l.idle, key)
		}
	}
	clear(l.used)
	if len(l.idle) == 0 {
		l.timer = nil
		return
	}
	l.timer.Reset(ownerLinger)
}

// close drops every idle owner and stops the sweeps.
func (l *lender) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.idle, l.used, l.closed = nil, nil, true
}

// returnOwner returns o, whose acquisition or release is done, to its lender through put once
// it holds nothing — at once, or, when a request of its is of unknown outcome, once that is
// settled in the background (see settleLater). An owner that still holds (a refused release)
// is not returned. One whose acquire's outcome is unknown is: its next acquisition adopts the
// hold Redis may count, or the hold lapses with its lease. When another user of the owner's
// op has it (a waiter's claim withdrawn, a late reply read, a concurrent HoldCount), the owner
// is returned once that is done, and the caller not kept.
func (c *Client) returnOwner(o *holder, put func()) {
	if !o.tryLock() {
		c.background(func() {
			_ = o.lock(context.Background())
			c.returnLocked(o, put)
		})
		return
	}
	c.returnLocked(o, put)
}

// returnLocked is returnOwner with o's op held, which it gives back.
func (c *Client) returnLocked(o *holder, put func()) {
	holds, unsettled := o.count, o.unsettled != nil
	if holds == 0 && !unsettled {
		o.lease.Store(nil) // the next holder's lease is its own
	}
	o.unlock()
	switch {
	case holds > 0:
	case unsettled:
		c.settleLater(&o.owner, func() { o.lease.Store(nil); put() })
	default:
		put()
	}
}

// settleLater repeats o's request of unknown outcome in the background (see background),
// with backoff, until Redis answers, then gives o to done: an owner no call of a handle will
// use again has no next call to settle it, and that call may never come, or come after the
// request's mark expired and act twice. It gives up when the Client closes, and before the
// mark may expire: the outcome then stays unknown for good, which it logs. Once Shutdown has
// begun, it has one retry budget more at most.
func (c *Client) settleLater(o *owner, done func()) {
	c.background(func() { c.settleNow(o, done) })
}

// settleNow is settleLater's background part.
func (c *Client) settleNow(o *owner, done func()) {
	// No call uses o (a Shutdown's release may, for a moment) — but a Reentrant handle's own
	// owner, whose call may have settled it meanwhile.
	_ = o.lock(context.Background())
	if o.unsettled == nil {
		o.unlock()
		done()
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), o.unsettled.sent.Add(unlockLatch-settleMargin))
	defer cancel()
	if c.isClosed() {
		// Closed before the lock was taken: the janitor may have deleted o's latch, and a
		// repeat would find no mark.
		c.log.Warn("a request's outcome stays unknown: the Client closed", o.fields()...)
		c.obs.outcome(o, true, ErrClosed)
		o.unlock()
		return
	}
	backoff, shut := retryBackoff, c.shut
	for {
		_, err := o.settle(ctx)
		if err == nil {
			o.unlock()
			done()
			return
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		case <-c.closed:
		case <-shut:
			// Shutdown awaits the settling: from now on it has one retry budget at most.
			shut = nil
			var stop context.CancelFunc
			ctx, stop = context.WithTimeout(ctx, c.budget)
			defer stop()
		}
		if ctx.Err() != nil || c.isClosed() {
			c.log.Warn("a request's outcome stays unknown; it is no longer repeated", o.fields(zap.Error(err))...)
			c.obs.outcome(o, true, err)
			o.unlock()
			return
		}
		backoff = min(backoff*2, maxBackoff)
	}
}
