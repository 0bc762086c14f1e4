package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	gosync "sync"
	"time"

	"github.com/redis/rueidis"
)

// redissonReadAcquire is Redisson's read lock acquire (docs/redisson-interop.md). It knows
// nothing of latchkey's writer claims ({N}:rwlock_writers): a reader enters whenever the
// lock is in read mode. KEYS[1] the lock hash N, KEYS[2] the owner's timeout key prefix;
// ARGV[1] lease ms, ARGV[2] owner, ARGV[3] owner:write. Reply: nil when acquired, else the
// lock's PTTL.
const redissonReadAcquire = `
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':1', 1)
    redis.call('pexpire', KEYS[2] .. ':1', ARGV[1])
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
    local k = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    local key = KEYS[2] .. ':' .. k
    redis.call('set', key, 1)
    redis.call('pexpire', key, ARGV[1])
    redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[1])))
    return nil
end
return redis.call('pttl', KEYS[1])
`

// redissonReadRelease is Redisson's read lock unlock (docs/redisson-interop.md) without the
// unlock latch, which only makes a retried release safe. The lock's TTL becomes the longest
// any read hold has left; freed, the hash is deleted and 0 published on the channel. KEYS[1]
// the lock hash, KEYS[2] its channel, KEYS[3] the owner's timeout key prefix, KEYS[4] the
// lock's key prefix {N}; ARGV[1] message (0), ARGV[2] owner. Reply: nil when the owner held
// no read lock, 0 when the lock is still held, 1 when freed.
const redissonReadRelease = `
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call('publish', KEYS[2], ARGV[1])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return nil
end
local c = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if c == 0 then
    redis.call('hdel', KEYS[1], ARGV[2])
end
redis.call('del', KEYS[3] .. ':' .. (c + 1))
if redis.call('hlen', KEYS[1]) > 1 then
    local left = -3
    for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
        local n = tonumber(redis.call('hget', KEYS[1], field))
        if type(n) == 'number' then
            for i = n, 1, -1 do
                left = math.max(left, redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i))
            end
        end
    end
    if left > 0 then
        redis.call('pexpire', KEYS[1], left)
        return 0
    end
    if mode == 'write' then
        return 0
    end
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1
`

// redissonReaders are readers that take a read-write lock as the threads of one Java
// Redisson client do, for the contrast row: Redisson's scripts, owner ids <uuid>:<thread>,
// one connection and one subscription to the lock's channel, which wakes every waiting reader
// on any message (Java wakes all on 1, the message of a write release, and one on 0; only a
// write release frees a lock readers wait for). The lock's name has no braces, so its keys
// take {name} as their hash tag.
type redissonReaders struct {
	rdb              rueidis.Client
	acquire, release *rueidis.Lua
	key, channel     string
	uuid             string

	mu   gosync.Mutex
	wake chan struct{} // closed, and replaced, at each message on the channel

	stop context.CancelFunc
	done chan struct{} // closed when the subscription has ended
}

// openRedissonReaders connects, and returns once the subscription to the lock's channel is
// confirmed, so that no release of the timed window goes unheard.
func openRedissonReaders(addr, key string) (*redissonReaders, error) {
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	rs := &redissonReaders{
		rdb: rdb, key: key, channel: "redisson_rwlock:{" + key + "}", uuid: newUUID(),
		acquire: rueidis.NewLuaScript(redissonReadAcquire), release: rueidis.NewLuaScript(redissonReadRelease),
		wake: make(chan struct{}), done: make(chan struct{}),
	}
	subscribed := make(chan struct{})
	var once gosync.Once
	ctx, stop := context.WithCancel(context.Background())
	rs.stop = stop
	ctx = rueidis.WithOnSubscriptionHook(ctx, func(rueidis.PubSubSubscription) { once.Do(func() { close(subscribed) }) })
	go func() {
		defer close(rs.done)
		_ = rdb.Receive(ctx, rdb.B().Subscribe().Channel(rs.channel).Build(), func(rueidis.PubSubMessage) { rs.wakeAll() })
	}()
	select {
	case <-subscribed:
		return rs, nil
	case <-rs.done:
		err = errors.New("subscription ended before it was confirmed")
	case <-time.After(10 * time.Second):
		err = errors.New("subscription not confirmed in 10s")
	}
	rs.close()
	return nil, fmt.Errorf("redisson-style readers: %s: %w", rs.channel, err)
}

func (rs *redissonReaders) close() {
	rs.stop()
	<-rs.done
	rs.rdb.Close()
}

// woken returns what the next message on the channel closes.
func (rs *redissonReaders) woken() <-chan struct{} {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.wake
}

func (rs *redissonReaders) wakeAll() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	close(rs.wake)
	rs.wake = make(chan struct{})
}

// reader returns the reader of thread id thread.
func (rs *redissonReaders) reader(thread int) *redissonReader {
	owner := rs.uuid + ":" + strconv.Itoa(thread)
	return &redissonReader{rs: rs, owner: owner, timeouts: "{" + rs.key + "}:" + owner + ":rwlock_timeout"}
}

// redissonReader is one Java-style reader thread.
type redissonReader struct {
	rs              *redissonReaders
	owner, timeouts string
}

// lock attempts until it gets the read lock, as Redisson's RLock.lock does: after each
// failed attempt it waits for a message on the channel, or for the lock's TTL to run out.
// The wake channel is taken before the attempt, so a message between the attempt's reply and
// the wait is not missed.
func (r *redissonReader) lock(ctx context.Context) error {
	rs := r.rs
	for {
		woken := rs.woken()
		ttl, err := rs.acquire.Exec(ctx, rs.rdb, []string{rs.key, r.timeouts},
			[]string{strconv.FormatInt(peerLease.Milliseconds(), 10), r.owner, r.owner + ":write"}).AsInt64()
		switch {
		case rueidis.IsRedisNil(err):
			return nil
		case err != nil:
			return err
		}
		if err := waitWoken(ctx, woken, time.Duration(ttl)*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitWoken waits for woken, for ttl when it is not negative, or for ctx.
func waitWoken(ctx context.Context, woken <-chan struct{}, ttl time.Duration) error {
	var expired <-chan time.Time
	if ttl >= 0 {
		t := time.NewTimer(ttl)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-woken:
	case <-expired:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (r *redissonReader) unlock(ctx context.Context) error {
	rs := r.rs
	err := rs.release.Exec(ctx, rs.rdb, []string{rs.key, rs.channel, r.timeouts, "{" + rs.key + "}"},
		[]string{"0", r.owner}).Error()
	if rueidis.IsRedisNil(err) {
		return fmt.Errorf("redisson-style reader %s: unlock found %q not held", r.owner, rs.key)
	}
	return err
}

// newUUID is a random UUID in the 8-4-4-4-12 form Redisson's client ids have.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
