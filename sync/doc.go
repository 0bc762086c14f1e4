// Package sync provides distributed synchronization primitives on Redis, laid out in Redis
// exactly as Redisson (Java) lays them out, so Go and Java services can share them.
//
// Import it as dsync:
//
//	import dsync "github.com/latchkey/latchkey/sync"
//
// A Client wraps a rueidis.Client and owns the background machinery every primitive shares:
// one pub/sub connection for all waiters, one watchdog goroutine that renews every held
// lease, and one janitor that tidies unlock latches. Primitives are handles made by the
// Client; a Lock handle is one owner, so goroutines that must exclude each other each take
// their own handle (c.Lock(name) is cheap and makes no network call).
//
// Every method that talks to Redis takes a context.Context first. Waiting methods return
// ctx.Err() when the context ends. Errors are matched with errors.Is against the sentinel
// errors of this package; bad arguments wrap ErrInvalidArgument and name the argument.
package sync
