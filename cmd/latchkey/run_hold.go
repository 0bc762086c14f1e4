package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	dsync "github.com/latchkey/latchkey/sync"
)

// envToken names the variable that carries a fenced lock's token to the command.
const envToken = "LATCHKEY_TOKEN"

// target is what run holds while the command runs: exactly one of its names is set.
type target struct {
	lock, semaphore, read, write string
	fair, fenced                 bool
	permits                      int // the semaphore's permits in all
}

// name and what are the held primitive's name and its description for messages.
func (t target) name() string {
	for _, n := range []string{t.lock, t.semaphore, t.read, t.write} {
		if n != "" {
			return n
		}
	}
	return ""
}

func (t target) what() string {
	switch {
	case t.fair:
		return fmt.Sprintf("fair lock %q", t.lock)
	case t.fenced:
		return fmt.Sprintf("fenced lock %q", t.lock)
	case t.lock != "":
		return fmt.Sprintf("lock %q", t.lock)
	case t.semaphore != "":
		return fmt.Sprintf("a permit of semaphore %q", t.semaphore)
	case t.read != "":
		return fmt.Sprintf("read lock %q", t.read)
	}
	return fmt.Sprintf("write lock %q", t.write)
}

// held is an acquisition run holds: what tells it the lease was lost, how to give it back,
// and what the command gets in its environment.
type held struct {
	lost    <-chan struct{}
	release func(ctx context.Context) error
	env     []string
}

// acquire takes t: waiting as long as ctx allows when wait is not set, up to wait otherwise
// (0: one attempt). It returns nil, nil when the wait ran out; warnings go to warn.
func acquire(ctx context.Context, c *dsync.Client, t target, wait optDuration, warn io.Writer) (*held, error) {
	var try []dsync.TryLockOption
	if wait.set {
		try = append(try, dsync.WaitTime(wait.d))
	}
	switch {
	case t.fenced:
		l := c.FencedLock(t.lock)
		var token int64
		var err error
		ok := true
		if wait.set {
			token, ok, err = l.TryLockToken(ctx, try...)
		} else {
			token, err = l.LockToken(ctx)
		}
		return heldIf(ok, err, l.Lost, l.Unlock, envToken+"="+strconv.FormatInt(token, 10))
	case t.lock != "":
		var l interface {
			Lock(context.Context, ...dsync.LockOption) error
			TryLock(context.Context, ...dsync.TryLockOption) (bool, error)
			Unlock(context.Context) error
			Lost() <-chan struct{}
		} = c.Lock(t.lock)
		if t.fair {
			l = c.FairLock(t.lock)
		}
		ok, err := take(ctx, wait.set, func() error { return l.Lock(ctx) }, func() (bool, error) { return l.TryLock(ctx, try...) })
		return heldIf(ok, err, l.Lost, l.Unlock)
	case t.read != "":
		l := c.RWLock(t.read)
		ok, err := take(ctx, wait.set, func() error { return l.RLock(ctx) }, func() (bool, error) { return l.TryRLock(ctx, try...) })
		return heldIf(ok, err, l.RLost, l.RUnlock)
	case t.write != "":
		l := c.RWLock(t.write)
		ok, err := take(ctx, wait.set, func() error { return l.Lock(ctx) }, func() (bool, error) { return l.TryLock(ctx, try...) })
		return heldIf(ok, err, l.Lost, l.Unlock)
	}
	return acquirePermit(ctx, c, t, wait, try, warn)
}

// acquirePermit takes one permit of t.semaphore, setting its permits to t.permits first if
// it has none yet. A semaphore that has another number of permits keeps it (runners started
// with different --permits must not undo each other), and warn is told.
func acquirePermit(ctx context.Context, c *dsync.Client, t target, wait optDuration, try []dsync.TryLockOption, warn io.Writer) (*held, error) {
	s := c.PermitSemaphore(t.semaphore)
	set, err := s.TrySetPermits(ctx, t.permits)
	if err != nil {
		return nil, err
	}
	if !set {
		if n, err := s.Permits(ctx); err == nil && n != t.permits {
			fmt.Fprintf(warn, "latchkey run: semaphore %q has %d permits in all, not --permits %d: "+
				"\"latchkey semaphore %s set %d\" changes that\n", t.semaphore, n, t.permits, t.semaphore, t.permits)
		}
	}
	var p *dsync.Permits
	ok := true
	if wait.set {
		p, ok, err = s.TryAcquire(ctx, 1, try...)
	} else {
		p, err = s.Acquire(ctx, 1)
	}
	if !ok || err != nil {
		return nil, err
	}
	return &held{lost: p.Lost(), release: p.Release}, nil
}

// take runs lock, or try when there is a wait limit.
func take(ctx context.Context, limited bool, lock func() error, try func() (bool, error)) (bool, error) {
	if limited {
		return try()
	}
	return true, lock()
}

func heldIf(ok bool, err error, lost func() <-chan struct{}, release func(context.Context) error, env ...string) (*held, error) {
	if !ok || err != nil {
		return nil, err
	}
	return &held{lost: lost(), release: release, env: env}, nil
}

// releaseFailed reports whether a release's error is worth telling: after a lost lease the
// hold is gone already, which the release only confirms.
func releaseFailed(err error, lost bool) bool {
	return err != nil && !(lost && (errors.Is(err, dsync.ErrLockLost) || errors.Is(err, dsync.ErrNotHeld)))
}
