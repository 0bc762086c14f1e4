-- Helpers shared by the scripts. Each script carries the helpers its body uses, and those
-- they use, in this file's order, without the comments above them (helpers.go): so this file
-- holds only `local function name(...)` declarations, each closed by an `end` in column 0,
-- one-line `local name = value` constants, comments and blank lines, and a declaration comes
-- after every helper it uses. Package lua's tests fail on a script that lacks a helper.

-- wrong_type stops the script with the error latchkey reports as ErrWrongType: key holds a
-- value the script cannot use. (A string error, not error_reply's table, which miniredis
-- cannot raise from a function.)
local function wrong_type(key)
    error('WRONGTYPE ' .. key .. ' holds a value of another kind')
end

-- int_at returns the integer key holds (a semaphore's permits, a latch's count), 0 when it
-- does not exist, and whether it exists; a value of another type or kind is wrong_type.
local function int_at(key)
    local v = redis.call('get', key)
    if not v then
        return 0, false
    end
    if not string.match(v, '^%-?%d+$') then
        wrong_type(key)
    end
    return tonumber(v), true
end

-- must_be stops the script (wrong_type) unless key holds a value of type kind or none.
local function must_be(key, kind)
    local t = redis.call('type', key)['ok']
    if t ~= kind and t ~= 'none' then
        wrong_type(key)
    end
end

-- extend sets key's TTL to at least ms (a number): a lease only grows.
local function extend(key, ms)
    if redis.call('pttl', key) < ms then
        redis.call('pexpire', key, ms)
    end
end

-- numbered runs a request numbered req on its owner's unlock latch (docs/redisson-interop.md):
-- run acts and returns the reply — nil, or a second value true, when it did not act (a
-- release of nothing, an acquire that found too few permits); replay is what a repeat of a
-- request that acted replies.
--
-- Safe to repeat. The latch is one key per owner, a high-water mark of its request numbers,
-- written and read in one SET ... GET (Redis 6.2+): n when request n acted, -n when it found
-- the lock not held. A run that finds its own number there is a repeat and replies what the
-- first run did, which follows from the request itself; a run that finds a higher number is
-- a stale duplicate, puts the mark back and changes nothing.
local function numbered(latch, latchPx, req, replay, run)
    local last = tonumber(redis.call('set', latch, req, 'px', latchPx, 'get'))
    if last and math.abs(last) >= req then
        if last ~= req then
            redis.call('set', latch, last, 'px', latchPx)
            return nil
        end
        return replay
    end
    local reply, idle = run()
    if reply == nil or idle then
        redis.call('set', latch, -req, 'px', latchPx)
    end
    return reply
end

-- cancel withdraws request req of an owner, whose outcome the owner does not know: if it ran
-- and acted (its number is the latch's mark), undo reverses what it did; either way the mark
-- becomes -req, so that a late run of it changes nothing. It replies 1 when it undid, 0
-- otherwise. Safe to repeat: a repeat finds -req and undoes nothing.
local function cancel(latch, latchPx, req, undo)
    local last = tonumber(redis.call('set', latch, -req, 'px', latchPx, 'get'))
    if last == req then
        undo()
        return 1
    end
    if last and math.abs(last) > req then
        redis.call('set', latch, last, 'px', latchPx)
    end
    return 0
end

-- give adds n permits (negative: takes them away) to the semaphore key and publishes the new
-- total on channel when it is positive, after mark if any, as Redisson's release does: its
-- waiters wake up to that many local waiters (Java throws on a negative one, and 0 wakes
-- nobody).
local function give(key, channel, n, publish, mark)
    local v = redis.call('incrby', key, n)
    if v > 0 then
        redis.call(publish, channel, (mark or '') .. v)
    end
    return v
end

-- not_held is release's reply when the owner does not hold the lock, after calling gone.
local function not_held(gone)
    if gone then
        gone()
    end
    return nil
end

-- release drops one of owner's holds on the exclusive lock hash key, numbered req on latch,
-- and calls free at the last hold, after the owner's field is deleted: free frees (or hands
-- on) the lock and returns the reply, which a repeat must give too (freed). It replies nil
-- when the owner does not hold the lock, 0 when a hold was dropped and the lock is still
-- held. The count left is one below the holds the owner knows (holds), whatever Redis
-- counted, and a partial release keeps the larger of the TTL left and leaseMs: a lease only
-- grows. gone, if not nil, is called when the owner turns out not to hold the lock: a
-- script that tells waiters of a lock that was gone already (Redisson does) does it there,
-- not on every run.
local function release(key, latch, latchPx, owner, holds, req, leaseMs, freed, free, gone)
    local replay = freed
    if holds > 1 then
        replay = 0
    end
    return numbered(latch, latchPx, req, replay, function()
        if holds > 1 then
            if redis.call('hexists', key, owner) == 0 then
                return not_held(gone)
            end
            redis.call('hset', key, owner, holds - 1)
            extend(key, leaseMs)
            return 0
        end
        -- The last hold. The owner's field is the only holder's (an exclusive lock), so
        -- deleting it tells in the same call whether the owner held the lock at all.
        if redis.call('hdel', key, owner) == 0 then
            return not_held(gone)
        end
        return free()
    end)
end

-- grow sets key's TTL to at least ms (creating it with value 1 if it is gone, for a read
-- hold's timeout key): a lease only grows.
local function grow(key, ms)
    if redis.call('pttl', key) < ms then
        redis.call('set', key, 1, 'px', ms)
    end
end

-- keep_lease sets key's TTL to the larger of what it has left and ms: a lease only grows.
-- Unlike extend it writes the TTL even when it is the longer already, so that a WAIT after
-- the script covers whatever set it.
local function keep_lease(key, ms)
    redis.call('pexpire', key, math.max(redis.call('pttl', key), ms))
end

-- renew_each is the reply of a batched renewal of n holds (lua.LockRenew, ReadRenew,
-- PermitRenew): an array, 1 at i where renew(i) found hold i still held and renewed it, 0
-- where it returned false.
local function renew_each(n, renew)
    local held = {}
    for i = 1, n do
        held[i] = renew(i) and 1 or 0
    end
    return held
end

-- reenter gives owner, which knows of holds holds (0: none), one more hold on the lock hash key
-- if its field is there: the count becomes holds+1, not an increment, so a repeat sets the
-- same count and a hold taken by an acquire whose reply was lost is adopted; the TTL becomes
-- the larger of what is left and leaseMs (a lease only grows). It returns true when it did,
-- and -3 when the owner knows of holds but its field is gone (nothing changes); otherwise
-- false.
local function reenter(key, owner, holds, leaseMs)
    if redis.call('hexists', key, owner) == 0 then
        if holds > 0 then
            return -3
        end
        return false
    end
    redis.call('hset', key, owner, holds + 1)
    extend(key, leaseMs)
    return true
end

-- drop_stale removes the fair lock's head waiters whose deadline has passed: queue is
-- the list of waiting owners, timeouts the zset of their deadlines, waiters the hash that
-- marks latchkey waiters (see fair_acquire), now epoch ms. As in Redisson, the deadlines
-- behind do not move: a Java waiter's is good only for the place it was set for. It returns
-- the head left (false: none) and its deadline (nil: none), which the caller may use for as
-- long as it has not changed the queue.
local function drop_stale(queue, timeouts, waiters, now)
    while true do
        local head = redis.call('lindex', queue, 0)
        if not head then
            return false
        end
        local deadline = tonumber(redis.call('zscore', timeouts, head))
        if not deadline or deadline > now then
            return head, deadline
        end
        redis.call('zrem', timeouts, head)
        redis.call('hdel', waiters, head)
        redis.call('lpop', queue)
    end
end

-- wake_head tells a free fair lock's head waiter, if there is one, to attempt: Redisson's
-- 0 on the head's own channel, channel..':'..head. head is as drop_stale returned it if the
-- queue has not changed since, or nil to read it. Nobody else is told, and nobody else can
-- take the lock: an acquire takes a free lock only at the head.
local function wake_head(queue, channel, publish, head)
    if head == nil then
        head = redis.call('lindex', queue, 0)
    end
    if head then
        redis.call(publish, channel .. ':' .. head, 0)
    end
end

-- Waiting latchkey clients of a plain lock (a latchkey addition; Redisson's layout is
-- untouched). A client with waiters on the lock registers a token of its own in the zset
-- clients, scored by when the registration lapses unless renewed (server time in µs, which
-- a double holds exactly, so that clients registering within a millisecond keep their
-- order); every waiting attempt registers its client anew, last. The client's waiters
-- listen on a channel of its own, clients..':'..token. A release that frees the lock wakes
-- the first-registered other client alone there, so that no message goes to every client,
-- and publishes 00 on the lock channel for Redisson's waiters, which read it as 0.
--
-- One waiting client, the listener, whose token the key listener holds (lapsing with its
-- registration unless renewed), also listens on the lock channel, for the releases only it
-- carries (a Redisson holder's, a Java forceUnlock: 0) and which latchkey's own (00) do not
-- repeat. A waiting attempt makes its client the listener if there is none; the listener
-- hands the role to the first-registered other client when it has no waiter left.

-- now_us is the server's clock in µs, as a string: a number passed to redis.call may be
-- written with 14 significant digits (100 µs here).
local function now_us(plus_ms)
    local t = redis.call('time')
    return string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]) + plus_ms * 1000)
end

-- wait_here registers token in clients for ms from now; a registration already there moves
-- to the end.
local function wait_here(clients, token, ms)
    redis.call('zadd', clients, now_us(ms), token)
    extend(clients, ms)
end

-- listen makes token's client the listener for ms if there is none, or keeps it so if it is,
-- and reports whether it is.
local function listen(listener, token, ms)
    local current = redis.call('get', listener)
    if current and current ~= token then
        return false
    end
    redis.call('set', listener, token, 'px', ms)
    return true
end

-- wake_client wakes the live client whose registration lapses first (the first-registered,
-- among clients with one wait time) on its own channel; its registration goes.
local function wake_client(clients, publish)
    if redis.call('exists', clients) == 1 then
        redis.call('zremrangebyscore', clients, '-inf', now_us(0))
        local next = redis.call('zrange', clients, 0, 0)[1]
        if next then
            redis.call('zrem', clients, next)
            redis.call(publish, clients .. ':' .. next, 0)
        end
    end
end

-- resign ends token's client's listening, if it is the listener: the role passes to the
-- first live registered client, for ms, which is told 00 on its own channel (no waiter of its
-- wakes for it).
local function resign(listener, token, clients, publish, ms)
    if redis.call('get', listener) ~= token then
        return
    end
    redis.call('del', listener)
    if redis.call('exists', clients) == 0 then
        return
    end
    redis.call('zremrangebyscore', clients, '-inf', now_us(0))
    local head = redis.call('zrange', clients, 0, 0)[1]
    if head then
        redis.call('set', listener, head, 'px', ms)
        redis.call(publish, clients .. ':' .. head, '00')
    end
end

-- wake_next announces that a plain lock is free: it wakes the next client (wake_client),
-- then publishes 00 on the lock channel: Redisson's waiters race that client, as Redisson's
-- non-fair lock has them race; the listener lets it pass.
local function wake_next(clients, channel, publish)
    wake_client(clients, publish)
    redis.call(publish, channel, '00')
end

-- Waiting latchkey clients of a semaphore (a latchkey addition; Redisson's layout is
-- untouched) register as a plain lock's do (wait_here, listen, resign), and record in the
-- hash wants the permits their first waiter wants. A change that leaves permits wakes the
-- first-registered live client that wants no more than are left, alone, on its own channel;
-- and publishes the total on the semaphore channel with a leading 0 for Redisson's waiters
-- (Java reads 05 as 5), which the listener lets pass: it carries to latchkey clients only
-- what Java publishes. A client woken that finds too few permits (another took them) wakes
-- the next that wants no more than are left: a wake is passed on only to a client the
-- permits can serve, so clients wanting more than there are never wake each other in turn.

-- sem_wait registers token's client in clients for ms, wanting want permits.
local function sem_wait(clients, wants, token, want, ms)
    wait_here(clients, token, ms)
    redis.call('hset', wants, token, want)
    extend(wants, ms)
end

-- wake_wanting wakes the first-registered live client but except (its own waiters are its
-- own to wake) that wants at most n permits, on its own channel; its registration goes,
-- unless it is the only one (it would only come back), and lapsed ones on the way go too.
local function wake_wanting(clients, wants, n, publish, except)
    if n <= 0 then
        return
    end
    local regs = redis.call('zrange', clients, 0, 63, 'withscores')
    if #regs == 0 then
        return
    end
    local now = tonumber(now_us(0))
    for i = 1, #regs, 2 do
        local token = regs[i]
        if tonumber(regs[i + 1]) <= now then
            redis.call('zrem', clients, token)
        elseif token ~= except and (tonumber(redis.call('hget', wants, token)) or n + 1) <= n then
            if #regs > 2 then
                redis.call('zrem', clients, token)
            end
            redis.call(publish, clients .. ':' .. token, n)
            return
        end
    end
end

-- announce tells of a semaphore's new total v: a positive one is published for Redisson's
-- waiters (with a leading 0, which latchkey's listeners pass over: it wakes a Client here)
-- and wakes a waiting client (wake_wanting).
local function announce(channel, v, publish, clients, wants)
    if v > 0 then
        redis.call(publish, channel, '0' .. v)
    end
    wake_wanting(clients, wants, v, publish)
end

-- offer adds n permits (negative: takes them away) to the semaphore key, and announces the
-- total.
local function offer(key, channel, n, publish, clients, wants)
    local v = redis.call('incrby', key, n)
    announce(channel, v, publish, clients, wants)
    return v
end

-- Permit-expirable semaphores (docs/redisson-interop.md): the key holds the available permits,
-- the zset timeouts the acquired ones, each a raw 16-byte ID scored by its expiry (epoch ms,
-- or no_expiry).
local no_expiry = '922337203685477'

-- from returns the elements of list from index i on (unpack would overflow Lua's C stack
-- beyond about 8,000 of them).
local function from(list, i)
    local out = {}
    for j = i, #list do
        out[#out + 1] = list[j]
    end
    return out
end

-- unhex turns a permit ID's 32 hex characters into the raw bytes the zset holds.
local function unhex(id)
    return (string.gsub(id, '..', function(h)
        return string.char(tonumber(h, 16))
    end))
end

-- reclaim gives back the permits whose lease ended by now (at most limit of them, if given)
-- and publishes the new total when positive.
local function reclaim(key, timeouts, channel, now, publish, limit)
    local expired
    if limit then
        expired = redis.call('zrangebyscore', timeouts, 0, now, 'limit', 0, limit)
    else
        expired = redis.call('zrangebyscore', timeouts, 0, now)
    end
    for _, id in ipairs(expired) do
        redis.call('zrem', timeouts, id)
    end
    if #expired > 0 then
        give(key, channel, #expired, publish)
    end
end

-- release_permits takes the listed permits (hex IDs) out of timeouts and gives back those
-- that were there, publishing the new total. It returns how many of them were there
-- unexpired at now.
local function release_permits(key, timeouts, channel, now, publish, ids)
    local live, removed = 0, 0
    for _, id in ipairs(ids) do
        local raw = unhex(id)
        local exp = redis.call('zscore', timeouts, raw)
        if exp then
            redis.call('zrem', timeouts, raw)
            removed = removed + 1
            if tonumber(exp) > now then
                live = live + 1
            end
        end
    end
    if removed > 0 then
        give(key, channel, removed, publish)
    end
    return live
end
