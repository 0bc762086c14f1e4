package sync

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The sentinels' texts name no primitive: an error about one object says which it is once,
// in front ("dsync: semaphore "jobs": not held: ..."; see objectError).
var (
	// ErrNotHeld is returned when the caller releases or inspects as owner a lock (or
	// permits) it does not hold. The lock is left untouched.
	ErrNotHeld = errors.New("dsync: not held")

	// ErrLockLost is returned when this handle held the lock (or permits) but it is gone
	// from Redis: it expired, was deleted or force-unlocked, or its lease ran out before the
	// call returned. It also matches ErrNotHeld. Lost() is closed by the time a call
	// returns it.
	ErrLockLost = errors.New("dsync: lease lost")

	// ErrOutcomeUnknown is returned when a request may or may not have acted: its reply was
	// lost, and every repeat within the retry budget was lost too (Redis unreachable). Each
	// method's doc says what the handle assumes then.
	ErrOutcomeUnknown = errors.New("dsync: outcome unknown")

	// ErrWrongType is returned, by every method that reads or changes the object, when a key
	// of the object holds a value of another type or kind (a string where a lock hash
	// belongs, a word where a semaphore's count belongs); the message names the key. Nothing
	// is changed.
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

// objectError is an error about one object: its text names the primitive and the object
// once, in front — "dsync: <what> "<name>": <err's text>", with every "dsync: " inside
// dropped and Redis's script decorations (SHA, Lua line) stripped — and it matches what err
// matches.
type objectError struct {
	what, name string
	err        error
}

func (e *objectError) Error() string {
	head := e.what + " " + strconv.Quote(e.name) + ": "
	text := strings.ReplaceAll(e.err.Error(), "dsync: ", "")
	text = strings.ReplaceAll(text, head, "") // a cause about the same object, named already
	text = strings.ReplaceAll(text, "\n", "; ")
	return "dsync: " + head + redisText(text)
}

func (e *objectError) Unwrap() error { return e.err }

// tagged is an error with the text msg that matches each of errs (errors.Is): one
// sentence for an error that is several of the sentinels at once.
type tagged struct {
	msg  string
	errs []error
}

func tag(msg string, errs ...error) error { return &tagged{msg, errs} }

func (e *tagged) Error() string   { return e.msg }
func (e *tagged) Unwrap() []error { return e.errs }

// scriptNoise matches what Redis (and miniredis) add to the error of a script: the script's
// SHA and line, a Lua traceback. They tell the caller nothing about the object.
var scriptNoise = regexp.MustCompile(` ?script: [0-9a-f]{40}, on @user_script:\d+\.|user_script:\d+: |` +
	`Error (running|compiling) script \([^)]*\): @?[a-z_]*:\d*:? ?| ?stack traceback:.*?\[G\]: \?`)

// redisText is a text without the script decorations of the Redis errors in it.
func redisText(s string) string { return strings.TrimSpace(scriptNoise.ReplaceAllString(s, "")) }

// wrongTypeText reports whether a Redis error says a key held a value of another type: a
// WRONGTYPE refusal (of a command, or raised by a script that found a value it cannot use),
// or an increment of a string that is not an integer.
func wrongTypeText(s string) bool {
	return strings.Contains(s, "WRONGTYPE") || strings.Contains(s, "not an integer")
}
