package sync

import (
	"errors"
	"fmt"
)

var (
	// ErrNotHeld is returned when the caller releases or inspects as owner a lock it does not
	// hold. The lock is left untouched.
	ErrNotHeld = errors.New("dsync: lock not held by this owner")

	// ErrLockLost is returned when this handle held the lock but it is gone from Redis: it
	// expired, was deleted or force-unlocked, or its lease ran out before the call returned.
	// It also matches ErrNotHeld. Lost() is closed by the time a call returns it.
	ErrLockLost = errors.New("dsync: lock lease lost")

	// ErrOutcomeUnknown is returned when a request may or may not have acted: its reply was
	// lost, and every repeat within the retry budget was lost too (Redis unreachable). Each
	// method's doc says what the handle assumes then.
	ErrOutcomeUnknown = errors.New("dsync: outcome unknown")

	// ErrWrongType is returned when the key of a primitive holds a value of another type
	// (a string where a lock hash belongs); the message names the key.
	ErrWrongType = errors.New("dsync: key holds a value of another type")

	// ErrInvalidArgument is wrapped by every error about a bad argument; the message names
	// the argument and its value.
	ErrInvalidArgument = errors.New("dsync: invalid argument")

	// ErrWouldDeadlock is returned at once, without waiting, for a request that could only
	// wait for ever: a read-write lock's write lock asked for by a handle holding only read
	// locks (an upgrade).
	ErrWouldDeadlock = errors.New("dsync: would deadlock")

	// ErrNotReplicated is returned, with WithSyncReplicas, when a change ran on the master
	// but fewer replicas than asked confirmed it in time, so a failover could lose it. An
	// acquisition so unconfirmed is given back before the call returns (the hold, or the
	// permits, are not the caller's); any other change — a release, a count-down, permits
	// set or added — stands on the master, and is not repeated: do not repeat it either.
	ErrNotReplicated = errors.New("dsync: not confirmed by enough replicas")

	// ErrClosed is returned by every method once the Client is closed.
	ErrClosed = errors.New("dsync: client closed")
)

// invalid returns an ErrInvalidArgument naming arg and what is wrong with it.
func invalid(arg, format string, a ...any) error {
	return fmt.Errorf("%w: %s %s", ErrInvalidArgument, arg, fmt.Sprintf(format, a...))
}
