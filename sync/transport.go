package sync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/latchkey/latchkey/lua"
	"github.com/redis/rueidis"
	"go.uber.org/zap"
)

// Transport: every request to Redis goes through here, bounded (see try) and repeated while
// its reply is lost or Redis refused to run it.

// exec runs a script that is safe to repeat (see try). With WithSyncReplicas, each run is
// followed by WAIT, and a run that got a reply but fewer confirmations than asked returns its
// reply with an error wrapping ErrNotReplicated.
func (c *Client) exec(ctx context.Context, call lua.Call) (rueidis.RedisMessage, error) {
	msg, _, err := c.try(ctx, true, true, &scriptCall{c, call})
	return msg, err
}

// read runs do, a read, as exec runs a script: repeated while its reply is lost, within the
// retry budget and while ctx lasts. An error says Redis could not be reached in time (a read
// has no outcome to be unknown), or that ctx ended.
func (c *Client) read(ctx context.Context, do func(context.Context) rueidis.RedisResult) (rueidis.RedisMessage, error) {
	msg, _, err := c.try(ctx, false, true, readCall(do))
	return msg, err
}

// once runs call a single time, for a request that is not safe to repeat (see try).
func (c *Client) once(ctx context.Context, call lua.Call) (rueidis.RedisMessage, error) {
	if err := ctx.Err(); err != nil {
		return rueidis.RedisMessage{}, err
	}
	msg, _, err := c.try(ctx, true, false, &scriptCall{c, call})
	return msg, err
}

// A call is one request as try sends it.
type call interface {
	// send sends it once and returns its result and how many replicas confirmed it (see
	// WithSyncReplicas; -1: WAIT did not answer).
	send(ctx context.Context) (rueidis.RedisResult, int64)
}

// A scriptCall runs a script, followed by WAIT with WithSyncReplicas: pipelined on the same
// connection, as WAIT counts the replicas that have the connection's writes.
type scriptCall struct {
	c    *Client
	call lua.Call
}

func (r *scriptCall) send(ctx context.Context) (rueidis.RedisResult, int64) {
	c, call := r.c, r.call
	if c.replicas == 0 {
		return call.Exec(ctx, c.rdb), 0
	}
	// On a connection of its own (Dedicated), so that the WAIT is the script's node's even
	// in a cluster, where a redirected command of a pipeline is resent alone: a redirect
	// (MOVED, ASK) comes back as the script's reply, and the run is repeated (notRun).
	var rs []rueidis.RedisResult
	derr := c.rdb.Dedicated(func(dc rueidis.DedicatedClient) error {
		run := func(whole bool) []rueidis.RedisResult {
			return dc.DoMulti(ctx, call.Cmd(dc.B(), whole),
				dc.B().Wait().Numreplicas(c.replicas).Timeout(c.replicaMs).Build())
		}
		// A script's first run is sent whole: sent by SHA where Redis lacks it, its WAIT
		// would still wait — the whole timeout while a replica is missing — for a run that
		// never was.
		_, loaded := c.loaded.Load(call.Script)
		rs = run(!loaded)
		rerr, isRedis := rueidis.IsRedisErr(rs[0].Error())
		if loaded && isRedis && rerr.IsNoScript() { // Redis lost it (a restart, a failover)
			rs = run(true)
		} else if !loaded { // sent whole, it is Redis's now
			c.loaded.Store(call.Script, struct{}{})
		}
		return nil
	})
	if len(rs) < 2 {
		return rueidis.NewErrorResult(fmt.Errorf("dsync: no connection for the script and its WAIT: %w", derr)), -1
	}
	n, err := rs[1].AsInt64()
	if err != nil {
		n = -1
	}
	return rs[0], n
}

// A readCall is a read: it has no replicas to wait for.
type readCall func(context.Context) rueidis.RedisResult

func (f readCall) send(ctx context.Context) (rueidis.RedisResult, int64) { return f(ctx), 0 }

// A sent is a send's outcome.
type sent struct {
	res       rueidis.RedisResult
	confirmed int64
}

// confirmed is the error of a change n replicas confirmed (see WithSyncReplicas).
func (c *Client) confirmed(n int64) error {
	switch {
	case n >= c.replicas:
		return nil
	case n < 0:
		return fmt.Errorf("%w: no reply to the WAIT after it", ErrNotReplicated)
	}
	return fmt.Errorf("%w: %d of %d replicas within %d ms", ErrNotReplicated, n, c.replicas, c.replicaMs)
}

// replied reports whether a request got its reply: err is nil, or says only that too few
// replicas confirmed the run (WithSyncReplicas).
func replied(err error) bool { return err == nil || errors.Is(err, ErrNotReplicated) }

// replyGrace is how long past the end of its call a request already sent is still awaited:
// a reply on its way then tells what the request did, which a guess would not.
const replyGrace = 25 * time.Millisecond

// minReplyWait is the least a request is awaited, whatever the retry budget: a small budget
// bounds the repeats, not how slow a reply may be.
const minReplyWait = 2 * time.Second

// bound is until when a call of ctx makes requests: its deadline or, without one (or a
// later one), the retry budget from now (at least minReplyWait).
func (c *Client) bound(ctx context.Context) time.Time {
	until := time.Now().Add(max(c.budget, minReplyWait))
	if d, ok := ctx.Deadline(); ok && d.Before(until) {
		return d
	}
	return until
}

// try sends r, for a change (exec) or a read (read), and repeats it if repeat is true. A
// reply lost to the network, or a refusal that means the script did not run (LOADING, BUSY,
// TRYAGAIN, MASTERDOWN, CLUSTERDOWN, READONLY; and MOVED, ASK, which reach it only from a
// connection of its own), is repeated with backoff within the retry budget and while ctx
// lasts (a release passes a context without cancellation: it must still run when the
// caller's request has ended).
//
// Every send has its end: the retry budget from the first (at least minReplyWait), and
// replyGrace: neither a Redis that is unreachable nor one that hangs holds a request longer,
// even if rueidis goes on waiting (as it does for a connection another request is dialling).
// The caller waits for a send as long as its ctx lasts, and replyGrace after it ended at
// most (a release, whose ctx has no end, for the send's whole life): a script already sent
// is awaited that long, since only its reply tells what it did. A send the caller stopped
// waiting for is pending: its outcome comes on the channel returned, by the send's end, for
// the caller to act on in the background (see owner.late). When no reply came back for a
// run that may have acted, the error wraps ErrOutcomeUnknown, and ctx.Err() once ctx ended.
// A nil reply is no error.
func (c *Client) try(ctx context.Context, change, repeat bool, r call) (rueidis.RedisMessage, <-chan sent, error) {
	start := time.Now()
	sendCtx := c.sendContext(ctx)
	backoff := retryBackoff
	unknown := false
	for {
		var out sent
		got := true // out is the send's outcome
		var pending chan sent
		if ended := ctx.Done(); ended == nil {
			// Nothing ends the caller's wait before the send's end, which bounds rueidis's
			// wait: no goroutine of its own, no hand-over.
			out.res, out.confirmed = r.send(sendCtx)
		} else {
			// The goroutine keeps the channel, not the variable, which the wait below clears.
			ch := make(chan sent, 1)
			pending = ch
			go func() {
				var s sent
				s.res, s.confirmed = r.send(sendCtx)
				ch <- s
			}()
			var grace <-chan time.Time
		wait:
			select {
			case out = <-pending:
				pending = nil
			case <-ended:
				if change {
					ended, grace = nil, time.After(replyGrace)
					goto wait
				}
			case <-sendCtx.Done():
				select {
				case out = <-pending: // came as the send ended
				default:
					got = false
				}
				pending = nil
			case <-grace:
			}
			if pending != nil {
				select {
				case out = <-pending:
					pending = nil
				default:
					return rueidis.RedisMessage{}, pending, c.failed(ctx, change, errNoReply)
				}
			}
			if !got {
				out.res = rueidis.NewErrorResult(errNoReply)
			}
		}
		if out.res.NonRedisError() != nil && sendCtx.Err() != nil {
			out.res = rueidis.NewErrorResult(errNoReply) // not the caller's cancellation: the send's end
		}
		msg, err := out.res.ToMessage()
		if err == nil || rueidis.IsRedisNil(err) {
			if change {
				return msg, nil, c.confirmed(out.confirmed)
			}
			return msg, nil, nil
		}
		rerr, isRedis := rueidis.IsRedisErr(err)
		closing := c.sawClosing(err) // the client is closed: nothing was sent
		unknown = unknown || (!isRedis && !closing)
		if !repeat || (isRedis && !notRun(rerr)) || closing || time.Since(start)+backoff > c.budget || sendCtx.Err() != nil ||
			ctx.Err() != nil || c.isClosed() {
			return msg, nil, c.failed(ctx, change && unknown, err)
		}
		c.log.Debug("no reply, or the script did not run; repeating the request", zap.Error(err))
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return msg, nil, c.failed(ctx, change && unknown, err)
		case <-c.closed:
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// sendContext is the context of a send of a call of ctx (try's): it has ctx's values, but
// ends when the send's life does (the retry budget, at least minReplyWait, and replyGrace),
// not with ctx: the caller stops waiting for a send when ctx ends (see send), but the send
// goes on, its reply still to be read. (rueidis may close the connection when a send's
// deadline passes with no reply, failing every other request on it: so the deadline is the
// send's last moment, never the caller's.) Sends that start within sendSlack of each other
// share one end, and so one timer.
func (c *Client) sendContext(ctx context.Context) context.Context {
	life := max(c.budget, minReplyWait) + replyGrace
	now := time.Now()
	w := c.window.Load()
	if w == nil || w.end.Sub(now) < life-sendSlack {
		next := &sendWindow{end: now.Add(life), done: make(chan struct{})}
		if c.window.CompareAndSwap(w, next) {
			time.AfterFunc(life, func() { close(next.done) })
			w = next
		} else {
			w = c.window.Load() // another send's, made just now
		}
	}
	if ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	return &windowCtx{Context: ctx, w: w}
}

// sendSlack is how much earlier than a whole send's life a send may end (see sendContext).
const sendSlack = 10 * time.Millisecond

// A sendWindow is the end shared by the sends that start within sendSlack of each other.
type sendWindow struct {
	end  time.Time
	done chan struct{} // closed at end
}

// windowCtx is a send's context: the caller's values, and its window's end.
type windowCtx struct {
	context.Context // the caller's, without its cancellation
	w               *sendWindow
}

func (s *windowCtx) Deadline() (time.Time, bool) { return s.w.end, true }
func (s *windowCtx) Done() <-chan struct{}       { return s.w.done }
func (s *windowCtx) Err() error {
	if done(s.w.done) {
		return context.DeadlineExceeded
	}
	return nil
}

// errNoReply is the error of a send that got no reply before it, or its caller's wait, ended.
var errNoReply = fmt.Errorf("no reply in time: %w", os.ErrDeadlineExceeded)

// failed is the error of a request of ctx that err ended: it wraps ctx.Err() once ctx has
// ended, and ErrOutcomeUnknown when unknown. A send's own deadline (see try), which rueidis
// reports as context.DeadlineExceeded, is reported as the timeout it is, so that it does not
// pass for the caller's.
func (c *Client) failed(ctx context.Context, unknown bool, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no reply in time: %w", os.ErrDeadlineExceeded)
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w: %w", cerr, err)
	}
	if unknown {
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	return err
}

// notRun reports whether a Redis error reply means the script never ran.
func notRun(e *rueidis.RedisError) bool {
	code, _, _ := strings.Cut(e.Error(), " ")
	switch code {
	case "LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN", "READONLY", "MOVED", "ASK":
		return true
	}
	return false
}

// nowMs is the wall clock in epoch ms, as Redisson's fair lock scripts take it: processes
// sharing a fair lock must keep their clocks in sync.
func nowMs() string { return strconv.FormatInt(time.Now().UnixMilli(), 10) }

// msOf is d in ms, as scripts take a duration.
func msOf(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
