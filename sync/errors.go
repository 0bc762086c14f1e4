package sync

import (
	"errors"
	"fmt"
)

var (
	// ErrNotHeld is returned when the caller releases or inspects as owner a lock it does not
	// hold. The lock is left untouched.
	ErrNotHeld = errors.New("dsync: lock not held by this owner")

	// ErrLockLost is returned by Unlock when this handle held the lock but its lease was lost
	// (it expired, was force-unlocked, or could not be renewed) before the release; it also
	// matches ErrNotHeld. Lost() was closed when the loss was noticed.
	ErrLockLost = errors.New("dsync: lock lease lost")

	// ErrInvalidArgument is wrapped by every error about a bad argument; the message names
	// the argument and its value.
	ErrInvalidArgument = errors.New("dsync: invalid argument")

	// ErrClosed is returned by every method once the Client is closed.
	ErrClosed = errors.New("dsync: client closed")
)

// invalid returns an ErrInvalidArgument naming arg and what is wrong with it.
func invalid(arg, format string, a ...any) error {
	return fmt.Errorf("%w: %s %s", ErrInvalidArgument, arg, fmt.Sprintf(format, a...))
}
