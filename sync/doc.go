// Package sync provides distributed synchronization primitives on Redis, laid out in Redis
// exactly as Redisson (Java) lays them out, so Go and Java services can share them. Every
// handle is safe for concurrent use, and a lock handle is a mutex: goroutines sharing it
// exclude each other as through one sync.Mutex (or sync.RWMutex), and so do handles on the
// same name in any goroutine, Client or process; an Unlock may come from another goroutine
// and ends the handle's oldest hold. Re-entry — Redisson's hold count, a holder taking the
// lock again at once — happens only through a handle made with Reentrant, which is one owner
// and belongs to one goroutine.
//
// Import it as dsync:
//
//	import dsync "github.com/latchkey/latchkey/sync"
//
// A Client wraps a rueidis.Client and owns the background machinery every primitive shares:
// one pub/sub connection for all waiters, one watchdog goroutine that renews every held
// lease, and one janitor that tidies unlock latches. Primitives are handles made by the
// Client. Making a handle is cheap and makes no network call: share one, or make one per
// request; the Client lends each acquisition an idle owner of the name, so both cost Redis
// the same.
//
// Every method that talks to Redis takes a context.Context first. Waiting methods return
// ctx.Err() when the context ends. Errors are matched with errors.Is against the sentinel
// errors of this package; bad arguments wrap ErrInvalidArgument and name the argument.
package sync
