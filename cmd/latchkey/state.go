package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Kinds of primitive, as inspect names them. A free lock of any kind leaves no key behind,
// and a semaphore and a countdown latch are both a number under the name: where the keys do
// not tell, inspect says so rather than guess.
const (
	kindNone             = "none"               // no key of any primitive by that name
	kindLock             = "lock"               // a (reentrant) lock's hash
	kindFairLock         = "fair_lock"          // a lock with a fair queue
	kindFencedLock       = "fenced_lock"        // a lock with a token counter
	kindRWLock           = "rwlock"             // a hash with a mode field
	kindPermitSemaphore  = "permit_semaphore"   // permits with an acquired-permit zset
	kindSemaphore        = "semaphore"          // a number whose semaphore channel has subscribers
	kindLatch            = "latch"              // a number whose latch channel has subscribers
	kindSemaphoreOrLatch = "semaphore_or_latch" // a number: nothing tells which
	kindOther            = "other"              // the key holds something no primitive writes
)

// noLease is the score Redisson gives a permit acquired without a lease.
const noLease = 922337203685477

// state is what Redis holds for one name, in Redisson's layout; inspect --json prints it.
// Durations are in milliseconds, times in epoch milliseconds; a TTL of -1 means none.
type state struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	RedisType string `json:"redis_type"`       // TYPE of the key called name
	TTLMs     *int64 `json:"ttl_ms,omitempty"` // PTTL of that key, when it exists

	Mode      string   `json:"mode,omitempty"`            // read-write lock: read or write
	Holders   []holder `json:"holders,omitempty"`         // locks: hash fields
	Token     *int64   `json:"fence_token,omitempty"`     // fenced lock: the newest token given
	Queue     []waiter `json:"queue,omitempty"`           // fair lock: waiting owners, in order
	Writers   []waiter `json:"writer_claims,omitempty"`   // read-write lock: waiting writers
	Clients   int64    `json:"waiting_clients,omitempty"` // lock, semaphore: latchkey Clients registered as waiting
	Available *int64   `json:"available,omitempty"`       // semaphores: available permits
	Acquired  []permit `json:"acquired,omitempty"`        // permit semaphore: acquired permits
	Count     *int64   `json:"count,omitempty"`           // countdown latch (or semaphore_or_latch): the number
	Value     string   `json:"value,omitempty"`           // kind other: what TYPE said is there, unread

	Seen *seen `json:"seen,omitempty"` // with inspect --watch: what the reads so far saw
}

// holder is one field of a lock hash: an owner and its holds.
type holder struct {
	Owner string `json:"owner"`
	Holds int64  `json:"holds"`
	// Write marks a read-write lock's writer (its field ends in ":write").
	Write bool `json:"write,omitempty"`
	// ReadTTLsMs are a reader's read holds' TTLs, one per hold.
	ReadTTLsMs []int64 `json:"read_ttls_ms,omitempty"`
}

// waiter is an entry of a fair queue or a writer claim: its owner and deadline.
type waiter struct {
	Owner      string `json:"owner"`
	DeadlineMs int64  `json:"deadline_ms"`    // epoch ms; a fair waiter not yet timed has 0
	InMs       int64  `json:"deadline_in_ms"` // from the time of reading; negative: passed
}

// permit is an acquired permit of a permit-expirable semaphore.
type permit struct {
	ID        string `json:"id"`                   // 32 hex characters
	ExpiresMs *int64 `json:"expires_ms,omitempty"` // epoch ms; absent for a permit without lease
	InMs      *int64 `json:"expires_in_ms,omitempty"`
}

// readState reads what Redis holds for name. It first asks for every key a primitive of that
// name may have, then reads in detail the ones that are there.
func readState(ctx context.Context, rdb rueidis.Client, name string) (state, error) {
	k := keysOf(name)
	b := rdb.B()
	probe := rdb.DoMulti(ctx,
		b.Type().Key(k.main).Build(),
		b.Pttl().Key(k.main).Build(),
		b.Exists().Key(k.fairQueue).Build(),
		b.Exists().Key(k.token).Build(),
		b.Exists().Key(k.permits).Build(),
		b.Exists().Key(k.writers).Build(),
		b.Zcard().Key(k.lockClients).Build(),
		b.Zcard().Key(k.semClients).Build(),
	)
	for _, r := range probe {
		if err := r.Error(); err != nil {
			return state{}, fmt.Errorf("read %q: %w", name, err)
		}
	}
	typ, _ := probe[0].ToString()
	ttl, _ := probe[1].AsInt64()
	has := func(i int) bool { n, _ := probe[i].AsInt64(); return n > 0 }
	queued, fenced, permits, writers := has(2), has(3), has(4), has(5)
	clients, _ := probe[6].AsInt64()
	semClients, _ := probe[7].AsInt64()

	s := state{Name: name, RedisType: typ, Clients: clients + semClients}
	if typ != "none" {
		s.TTLMs = &ttl
	}
	now := time.Now().UnixMilli()
	var err error
	switch typ {
	case "hash":
		err = s.readHash(ctx, rdb, k, now)
		if s.Kind == kindLock {
			s.Kind = lockKind(queued, fenced)
		}
	case "string":
		err = s.readNumber(ctx, rdb, k, permits, semClients > 0, now)
	case "none":
		switch {
		case queued:
			s.Kind = kindFairLock
		case fenced:
			s.Kind = kindFencedLock
		case permits:
			s.Kind = kindPermitSemaphore
			s.Available = new(int64) // a missing key counts 0
			err = s.readPermits(ctx, rdb, k, now)
		case writers:
			s.Kind = kindRWLock
		case clients > 0:
			s.Kind = kindLock
		case semClients > 0: // waiting for permits not set yet: a missing key counts 0
			s.Kind, s.Available = kindSemaphore, new(int64)
		default:
			s.Kind = kindNone
		}
	default:
		s.Kind, s.Value = kindOther, typ
	}
	if err == nil && s.Kind == kindFairLock {
		err = s.readQueue(ctx, rdb, k, now)
	}
	if err == nil && s.Kind == kindFencedLock {
		err = s.readToken(ctx, rdb, k)
	}
	if err == nil && s.Kind == kindRWLock && writers {
		s.Writers, err = readDeadlines(ctx, rdb, k.writers, now)
	}
	if err != nil {
		return state{}, fmt.Errorf("read %q: %w", name, err)
	}
	return s, nil
}

func lockKind(queued, fenced bool) string {
	switch {
	case queued:
		return kindFairLock
	case fenced:
		return kindFencedLock
	}
	return kindLock
}

// readHash reads a lock's hash: its holders, and for a read-write lock its mode and each
// reader's read holds.
func (s *state) readHash(ctx context.Context, rdb rueidis.Client, k keys, now int64) error {
	fields, err := rdb.Do(ctx, rdb.B().Hgetall().Key(k.main).Build()).AsStrMap()
	if err != nil {
		return err
	}
	s.Kind = kindLock
	if mode, ok := fields["mode"]; ok {
		s.Kind, s.Mode = kindRWLock, mode
		delete(fields, "mode")
	}
	for f, v := range fields {
		n, _ := strconv.ParseInt(v, 10, 64)
		h := holder{Owner: f, Holds: n}
		if s.Kind == kindRWLock {
			if owner, ok := strings.CutSuffix(f, ":write"); ok {
				h.Owner, h.Write = owner, true
			} else if h.ReadTTLsMs, err = readTTLs(ctx, rdb, s.Name, f, n); err != nil {
				return err
			}
		}
		s.Holders = append(s.Holders, h)
	}
	sort.Slice(s.Holders, func(i, j int) bool {
		a, b := s.Holders[i], s.Holders[j]
		if a.Owner != b.Owner {
			return a.Owner < b.Owner
		}
		return a.Write && !b.Write
	})
	return nil
}

// readTTLs reads the TTLs of a reader's read-hold keys 1..holds.
func readTTLs(ctx context.Context, rdb rueidis.Client, name, owner string, holds int64) ([]int64, error) {
	holds = min(holds, 1000) // a count no process could have taken; bounds one reply
	cmds := make(rueidis.Commands, 0, holds)
	for i := int64(1); i <= holds; i++ {
		cmds = append(cmds, rdb.B().Pttl().Key(readTimeoutKey(name, owner, i)).Build())
	}
	ttls := make([]int64, 0, holds)
	for _, r := range rdb.DoMulti(ctx, cmds...) {
		n, err := r.AsInt64()
		if err != nil {
			return nil, err
		}
		ttls = append(ttls, n)
	}
	return ttls, nil
}

// readNumber reads a semaphore's permits or a latch's count, and tells which it is when the
// keys or the channels' subscribers do.
func (s *state) readNumber(ctx context.Context, rdb rueidis.Client, k keys, permits, semWaiters bool, now int64) error {
	n, err := rdb.Do(ctx, rdb.B().Get().Key(k.main).Build()).AsInt64()
	if err != nil {
		s.Kind, s.Value = kindOther, "string"
		return nil // a string that is not a number is no primitive's
	}
	if permits {
		s.Kind, s.Available = kindPermitSemaphore, &n
		return s.readPermits(ctx, rdb, k, now)
	}
	if semWaiters { // only a semaphore's waiters register their Clients
		s.Kind, s.Available = kindSemaphore, &n
		return nil
	}
	subs, err := rdb.Do(ctx, rdb.B().PubsubNumsub().Channel(k.semChannel, k.latchChannel).Build()).ToArray()
	if err != nil {
		return err
	}
	count := func(i int) int64 {
		if len(subs) <= i {
			return 0
		}
		n, _ := subs[i].AsInt64()
		return n
	}
	switch sem, latch := count(1), count(3); {
	case latch > 0 && sem == 0:
		s.Kind, s.Count = kindLatch, &n
	case sem > 0 && latch == 0:
		s.Kind, s.Available = kindSemaphore, &n
	default:
		s.Kind, s.Count = kindSemaphoreOrLatch, &n
	}
	return nil
}

// readPermits reads a permit-expirable semaphore's acquired permits, nearest expiry first.
func (s *state) readPermits(ctx context.Context, rdb rueidis.Client, k keys, now int64) error {
	zs, err := rdb.Do(ctx, rdb.B().Zrange().Key(k.permits).Min("0").Max("-1").Withscores().Build()).AsZScores()
	if err != nil {
		return err
	}
	for _, z := range zs {
		p := permit{ID: hex.EncodeToString([]byte(z.Member))}
		if exp := int64(z.Score); exp != noLease {
			in := exp - now
			p.ExpiresMs, p.InMs = &exp, &in
		}
		s.Acquired = append(s.Acquired, p)
	}
	return nil
}

// readQueue reads a fair lock's queue and each waiter's deadline.
func (s *state) readQueue(ctx context.Context, rdb rueidis.Client, k keys, now int64) error {
	owners, err := rdb.Do(ctx, rdb.B().Lrange().Key(k.fairQueue).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil {
		return err
	}
	deadlines, err := readDeadlines(ctx, rdb, k.fairTimeouts, now)
	if err != nil {
		return err
	}
	at := make(map[string]int64, len(deadlines))
	for _, d := range deadlines {
		at[d.Owner] = d.DeadlineMs
	}
	for _, o := range owners {
		w := waiter{Owner: o, DeadlineMs: at[o]}
		if w.DeadlineMs != 0 {
			w.InMs = w.DeadlineMs - now
		}
		s.Queue = append(s.Queue, w)
	}
	return nil
}

// readDeadlines reads a zset of owner → deadline (epoch ms), earliest first.
func readDeadlines(ctx context.Context, rdb rueidis.Client, key string, now int64) ([]waiter, error) {
	zs, err := rdb.Do(ctx, rdb.B().Zrange().Key(key).Min("0").Max("-1").Withscores().Build()).AsZScores()
	if err != nil {
		return nil, err
	}
	out := make([]waiter, 0, len(zs))
	for _, z := range zs {
		out = append(out, waiter{Owner: z.Member, DeadlineMs: int64(z.Score), InMs: int64(z.Score) - now})
	}
	return out, nil
}

func (s *state) readToken(ctx context.Context, rdb rueidis.Client, k keys) error {
	msg, err := rdb.Do(ctx, rdb.B().Get().Key(k.token).Build()).ToMessage()
	if err != nil {
		if rueidis.IsRedisNil(err) {
			return nil
		}
		return err
	}
	n, err := msg.AsInt64()
	if err != nil {
		return err
	}
	s.Token = &n
	return nil
}
