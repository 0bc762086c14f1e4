-- Fair lock acquire (Redisson RFairLock; docs/redisson-interop.md), safe to repeat.
-- Keys, arguments and reply: lua.FairAcquire (calls.go). A free lock is taken only by the
-- head waiter, or by anyone when nobody waits; a waiter's hint is the holder's PTTL at the
-- head, the head's deadline behind it.
--
-- A waiter's deadline is set by each of its attempts to now + wait, plus a wait for every
-- Java waiter ahead of it (a Java waiter taking the lock moves every deadline one of its
-- waits earlier). Our acquires move no deadline: a Java waiter's only grows more lenient. So
-- a live waiter, which attempts at least every wait/3, is never found stale at the head, and
-- a dead one's place lapses at the head one wait after its last attempt. Redisson instead
-- moves every deadline whenever a waiter takes the lock, which costs a command per waiter.
local now, wait = tonumber(ARGV[5]), tonumber(ARGV[4])
local head, first = drop_stale(KEYS[2], KEYS[3], KEYS[4], now) -- until the queue changes
local r = reenter(KEYS[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[1]))
if r then
    return r == -3 and -3 or nil
end
local pttl = redis.call('pttl', KEYS[1]) -- -2: no lock
if pttl == -2 and (not head or head == ARGV[2]) then
    if head then
        redis.call('lpop', KEYS[2])
    end
    redis.call('zrem', KEYS[3], ARGV[2])
    redis.call('hdel', KEYS[4], ARGV[2])
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if ARGV[6] ~= '1' then
    return pttl
end
local pos, len = redis.call('lpos', KEYS[2], ARGV[2]), nil
if not pos then
    len = redis.call('rpush', KEYS[2], ARGV[2]) -- the queue's length, with the new place
    pos = len - 1
end
redis.call('hset', KEYS[4], ARGV[2], 1) -- a latchkey waiter's place
-- The mark of a waiter that left with no script of ours (Java's dropped it as stale) lives
-- until the queue has been idle three waits.
redis.call('pexpire', KEYS[4], 3 * wait)
local java = 0
-- Java waiters ahead are counted only when there may be any (fewer marks than places): the
-- count is a walk of the queue, 30 µs of Redis time at 60 places. A mark left behind by a
-- Java script (which drops a dead latchkey waiter without knowing of the hash) can hide a
-- Java waiter from the count until the hash lapses; the waiter's deadline is then one wait
-- short per Java waiter hidden, and a Java waiter taking the lock can make it stale at the
-- head: it loses its place and queues again at its next attempt.
if pos > 0 and redis.call('hlen', KEYS[4]) < (len or redis.call('llen', KEYS[2])) then
    local ahead = redis.call('lrange', KEYS[2], 0, pos - 1)
    for _, mark in ipairs(redis.call('hmget', KEYS[4], unpack(ahead))) do
        if not mark then
            java = java + 1
        end
    end
end
redis.call('zadd', KEYS[3], 'GT', now + (java + 1) * wait, ARGV[2]) -- a deadline only grows
if pos == 0 then
    return pttl
end
-- Behind the head, which is as drop_stale found it: only a place at the tail was added.
if not first then
    return -1
end
return math.max(first - now, 0)
