package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	gosync "sync"
	"sync/atomic"
	"time"

	dsync "github.com/latchkey/latchkey/sync"
)

// The latch fan-out scenario: latchAwaiters goroutines spread over latchClients Clients await
// one CountDownLatch of count 1; once every one of them is waiting, one CountDown from a
// Client of its own, and the time until the last Await returns. A zero message wakes every
// awaiter of a Client with no further request, so this is one publish reaching latchClients
// subscriber connections and each Client waking its goroutines. It runs latchRounds rounds,
// each on a latch of its own, on Clients opened once.
const (
	latchName     = "latchkey CountDownLatch fan-out"
	latchAwaiters = 1000
	latchClients  = 10
	latchRounds   = 5
	// latchPatience bounds a round's waits: for every awaiter to be waiting, and for them all
	// to return after the count-down.
	latchPatience = 30 * time.Second
)

// latchResult is the fan-out scenario's rounds; err is set when it failed.
type latchResult struct {
	rounds []latchRound
	err    error
}

// latchRound is one round: from the CountDown being sent to the last Await returning and to
// half of them having returned, and the commands Redis ran meanwhile (see countedCalls;
// cmdsOK false when unknown).
type latchRound struct {
	last, p50 time.Duration
	cmds      int64
	cmdsOK    bool
}

// median and max of one figure over the rounds.
func (r latchResult) stat(f func(latchRound) time.Duration) (median, worst time.Duration) {
	var d durations
	for _, x := range r.rounds {
		d = append(d, f(x))
	}
	return d.pct(50), d.max()
}

// runLatch runs the fan-out scenario if -only names it (or nothing).
func runLatch(ctx context.Context, srv *server, o options, stdout io.Writer) *latchResult {
	if !o.runs(latchName) {
		return nil
	}
	fmt.Fprintf(stdout, "latch fan-out: %d awaiters over %d clients, %d rounds ...\n", latchAwaiters, latchClients, latchRounds)
	var r latchResult
	r.rounds, r.err = latchFanOut(ctx, srv)
	return &r
}

// latchFanOut opens latchClients Clients for the awaiters and one to count down, and runs
// the rounds.
func latchFanOut(ctx context.Context, srv *server) ([]latchRound, error) {
	var cs []*dsync.Client
	for range latchClients + 1 {
		s, err := openLatchkey(false)(srv.addr)
		if err != nil {
			return nil, err
		}
		defer s.close()
		cs = append(cs, s.(*latchkeySession).c)
	}
	// A count-down first, so that Redis has its script before the first timed one.
	warm := cs[latchClients].CountDownLatch("bench:latch:warm")
	if _, err := warm.TrySetCount(ctx, 1); err != nil {
		return nil, err
	}
	if err := warm.CountDown(ctx); err != nil {
		return nil, err
	}
	var rounds []latchRound
	for i := range latchRounds {
		r, err := latchRun(ctx, srv, cs[:latchClients], cs[latchClients], "bench:latch:"+strconv.Itoa(i))
		if err != nil {
			return rounds, fmt.Errorf("round %d: %w", i+1, err)
		}
		rounds = append(rounds, r)
	}
	return rounds, nil
}

// latchRun is one round on the latch called name: setter sets its count to 1, latchAwaiters
// goroutines await it, awaiter i through awaiters[i mod len(awaiters)] on a handle its Client's
// awaiters share (Await takes no turns on a handle), and once they all wait (see
// latchWaiting), setter counts it down.
func latchRun(ctx context.Context, srv *server, awaiters []*dsync.Client, setter *dsync.Client, name string) (latchRound, error) {
	var r latchRound
	l := setter.CountDownLatch(name)
	switch ok, err := l.TrySetCount(ctx, 1); {
	case err != nil:
		return r, fmt.Errorf("TrySetCount: %w", err)
	case !ok:
		return r, fmt.Errorf("TrySetCount: latch %q exists already", name)
	}
	handles := make([]*dsync.CountDownLatch, len(awaiters))
	for i, c := range awaiters {
		handles[i] = c.CountDownLatch(name)
	}
	stats := resetStats(ctx, srv) == nil
	wctx, cancel := context.WithTimeout(ctx, latchPatience)
	defer cancel()
	returned := make([]time.Time, latchAwaiters)
	var done atomic.Int64
	errs := make(chan error, latchAwaiters)
	var wg gosync.WaitGroup
	for i := range latchAwaiters {
		wg.Go(func() {
			err := handles[i%len(handles)].Await(wctx)
			returned[i] = time.Now()
			done.Add(1)
			if err != nil {
				errs <- fmt.Errorf("awaiter %d: %w", i, err)
			}
		})
	}
	if err := latchWaiting(wctx, srv, "redisson_countdownlatch__channel__{"+name+"}", len(awaiters), &done, stats); err != nil {
		cancel()
		wg.Wait()
		return r, err
	}
	stats = stats && resetStats(ctx, srv) == nil
	start := time.Now()
	if err := l.CountDown(ctx); err != nil {
		cancel()
		wg.Wait()
		return r, fmt.Errorf("CountDown: %w", err)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return r, err
	}
	if stats {
		r.cmds, r.cmdsOK = countedSinceReset(ctx, srv)
	}
	var d durations
	for _, t := range returned {
		d = append(d, t.Sub(start))
	}
	r.last, r.p50 = d.max(), d.pct(50)
	return r, nil
}

// latchWaiting returns once every awaiter waits: none has returned, channel has a
// subscriber per Client (PUBSUB NUMSUB), and — where the command statistics, reset as the
// awaiters started, can be read — Redis has had a count read (GET) for each awaiter and no
// more since the last poll. An awaiter reads the count before it waits (and once more as its
// subscription is confirmed), so when the reads stop with at least one per awaiter, no
// awaiter is still on its way in. Without the statistics it waits latchSettle instead.
func latchWaiting(ctx context.Context, srv *server, channel string, clients int, done *atomic.Int64, stats bool) error {
	const poll, latchSettle = 20 * time.Millisecond, 500 * time.Millisecond
	var reads int64 = -1
	for {
		if n := done.Load(); n > 0 {
			return fmt.Errorf("%d awaiters returned before the count-down", n)
		}
		subs, err := numsub(ctx, srv, channel)
		if err != nil {
			return err
		}
		if subs == clients {
			if !stats {
				time.Sleep(latchSettle)
				return nil
			}
			info, err := readStats(ctx, srv)
			if err != nil {
				return err
			}
			n := commandCalls(info, "get")
			if n >= latchAwaiters && n == reads {
				return nil
			}
			reads = n
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("awaiters not all waiting: %d of %d clients subscribed, %d count reads: %w", subs, clients, reads, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// numsub returns channel's subscriber count (PUBSUB NUMSUB).
func numsub(ctx context.Context, srv *server, channel string) (int, error) {
	reply, err := srv.admin.Do(ctx, srv.admin.B().PubsubNumsub().Channel(channel).Build()).ToArray()
	if err != nil {
		return 0, err
	}
	if len(reply) != 2 {
		return 0, errors.New("PUBSUB NUMSUB: unexpected reply")
	}
	n, err := reply[1].AsInt64()
	return int(n), err
}

// commandCalls returns the calls of command name in INFO commandstats.
func commandCalls(stats, name string) int64 {
	for _, c := range commandStats(stats, "calls") {
		if c.name == name {
			return int64(c.value)
		}
	}
	return 0
}
