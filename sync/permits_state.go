package sync

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/latchkey/latchkey/internal/names"
	"github.com/latchkey/latchkey/lua"
	"github.com/latchkey/latchkey/watchdog"
	"github.com/redis/rueidis"
)

// checkPermitID validates a permit ID: 16 bytes in hex.
func checkPermitID(id string) error {
	if _, err := hex.DecodeString(id); err != nil || len(id) != 32 {
		return invalid("permit ID", "must be 32 hex characters, got %q", id)
	}
	return nil
}

// UpdateLeaseTime extends the lease of the permit id to end lease from now, and reports
// whether it was acquired (and unexpired). Leases only grow: a permit whose lease ends later
// (or never) keeps it, so that no holder's Valid outlives its permit. (Redisson's sets the
// lease, also shorter.) A permit kept by the watchdog is still renewed by it. lease must be
// at least 1 ms.
func (s *PermitSemaphore) UpdateLeaseTime(ctx context.Context, id string, lease time.Duration) (bool, error) {
	if err := checkPermitID(id); err != nil {
		return false, err
	}
	if lease < time.Millisecond {
		return false, invalid("lease", "must be >= 1ms, got %v", lease)
	}
	expiry := strconv.FormatInt(time.Now().Add(lease).UnixMilli(), 10)
	msg, err := s.state(ctx, "update", id, expiry)
	if !replied(err) {
		return false, err
	}
	n, perr := msg.AsInt64()
	if perr != nil {
		return false, s.p.wrap(perr)
	}
	return n == 1, err
}

// LeaseTime returns how long the permit id has before its lease ends, NoExpiry for a permit
// acquired without a lease (by Redisson), or an error wrapping ErrNotHeld when it is not
// acquired.
func (s *PermitSemaphore) LeaseTime(ctx context.Context, id string) (time.Duration, error) {
	if err := checkPermitID(id); err != nil {
		return 0, err
	}
	msg, err := s.state(ctx, "lease", id, "")
	if err != nil {
		return 0, err
	}
	if msg.IsNil() {
		return 0, s.p.wrap(fmt.Errorf("%w: permit %s is not acquired", ErrNotHeld, id))
	}
	ms, err := msg.AsInt64()
	if err != nil {
		return 0, s.p.wrap(err)
	}
	if ms < 0 {
		return NoExpiry, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// AvailablePermits returns the number of permits available now, after giving back expired
// ones.
func (s *PermitSemaphore) AvailablePermits(ctx context.Context) (int, error) {
	return s.count(ctx, "available")
}

// AcquiredPermits returns the number of permits acquired now, after giving back expired
// ones.
func (s *PermitSemaphore) AcquiredPermits(ctx context.Context) (int, error) {
	return s.count(ctx, "acquired")
}

// Permits returns the number of permits in all, available and acquired (0 when the
// semaphore does not exist), after giving back expired ones.
func (s *PermitSemaphore) Permits(ctx context.Context) (int, error) { return s.count(ctx, "permits") }

// count reads one of the semaphore's counts: mode is "available", "acquired" or "permits".
func (s *PermitSemaphore) count(ctx context.Context, mode string) (int, error) {
	msg, err := s.state(ctx, mode, "", "")
	if err != nil {
		return 0, err
	}
	n, err := msg.AsInt64()
	return int(n), s.p.wrap(err)
}

// state runs lua.PermitState in mode, for the permit id and its new expiry where the mode
// takes them, repeated within the retry budget while its reply is
// lost (it is safe to repeat): a read (every mode but "update") as Client.read does, waiting
// for Redis while ctx lasts, and without a deadline for the retry budget at most. Its error
// names the semaphore.
func (s *PermitSemaphore) state(ctx context.Context, mode, id, expiry string) (rueidis.RedisMessage, error) {
	o := &s.p.owner
	if err := o.check(ctx); err != nil {
		return rueidis.RedisMessage{}, o.wrap(err)
	}
	// A read unless it updates: what a read gave back of expired permits needs no
	// confirming.
	msg, _, err := o.c.try(ctx, mode == "update", true, &scriptCall{o.c, lua.PermitState{Semaphore: o.name, Acquired: s.timeouts,
		Channel: s.channel, Mode: mode, NowMs: nowMs(), Publish: o.c.publishCmd, ID: id, ExpiryMs: expiry}.Call()})
	return msg, o.wrap(err)
}

// permitKeys are a batch of permit acquisitions' keys for lua.PermitRenew: each
// semaphore's zset of acquired permits.
func permitKeys(b watchdog.Batch) []string {
	keys := make([]string, len(b.Keys))
	for i, k := range b.Keys {
		keys[i] = names.Suffix(k, "timeout")
	}
	return keys
}

// keys are the semaphore's keys its scripts that change permits share.
func (s *PermitSemaphore) keys() lua.PermitKeys {
	return lua.PermitKeys{Semaphore: s.p.name, Acquired: s.timeouts, Channel: s.channel}
}
