package sync

// What both semaphores share: their argument checks and how their waiters wait.

import (
	"context"
	"math"
	"time"

	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/pubsub"
)

// maxPermits is the most permits one call may name: Redisson counts them in a Java int.
const maxPermits = math.MaxInt32

// checkPermits validates a number of permits called arg, at least least.
func checkPermits(arg string, n, least int) error {
	if n < least || n > maxPermits {
		return invalid(arg, "must be in [%d, %d], got %d", least, maxPermits, n)
	}
	return nil
}

// semaphorePolicy wakes the longest-waiting local waiter on a release: the others' turns
// come one by one (see acquirePermits).
func semaphorePolicy(payload string) int { return min(pubsub.CountPolicy(payload), 1) }

// semaphoreForward is semaphorePolicy for what the listener hears on Redisson's channel:
// only what Java publishes, not latchkey's totals (with a leading 0), which woke a Client
// already (see lib.lua's offer).
func semaphoreForward(payload string) int {
	if len(payload) > 1 && payload[0] == '0' {
		return 0
	}
	return semaphorePolicy(payload)
}

// registration is what an attempt did to its Client's registration as a waiter.
type registration int

const (
	registrationNone    registration = iota // not a registering attempt, or no reply
	registrationKept                        // registered, or kept for the Client's other waiters
	registrationDropped                     // it took, and dropped the registration
)

// acquirePermits is how both semaphores wait for permits, up to limit (0: one attempt;
// negative: no limit), attempting with a. A Client's waiters are served in arrival order:
// a newcomer joins behind them, only the first attempts (wait.ordered), and the first wakes
// the next when it leaves — when it gave up, or when it was served and the next may be too
// (its attempter wakes it then: see Semaphore.attempt). With h, a local release may hand
// the wait its permits (permitHeirs.give); one handed them that had seen permits too few for
// it in Redis wakes the next waiter, for which they may be enough: nothing else would, as a
// hand-off sends no message.
func (c *Client) acquirePermits(ctx context.Context, channel string, limit time.Duration, h *permitsHeir, a attempter) (bool, error) {
	if limit == 0 {
		_, ok, err := a.attempt(ctx)
		return ok, err
	}
	w := wait{channel: channel, policy: semaphorePolicy, limit: limit, join: true, ordered: true, attempt: a}
	if h != nil {
		w.heir = h
	}
	ok, err := c.acquire(ctx, w)
	if !ok || (h != nil && h.state.Load() == heirGone && h.more.Load()) {
		c.mux.Wake(channel)
	}
	return ok, err
}

// keys are the semaphore's keys its scripts that change permits share.
func (s *Semaphore) keys() lua.SemKeys {
	return lua.SemKeys{Semaphore: s.p.name, Channel: s.q.channel, Clients: s.q.clients, Wants: s.wants}
}
