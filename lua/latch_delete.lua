-- Delete an owner's unlock latch if it still records the given unlock (a latchkey addition;
-- Redisson deletes its one-request latches unconditionally).
-- KEYS[1] latch key; ARGV[1] the request id of the unlock it was left by.
-- Reply: 1 when deleted, 0 when absent or overwritten by a later unlock, which is its
-- owner's to clean up.
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
