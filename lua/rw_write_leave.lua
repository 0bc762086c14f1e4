-- A waiting writer gives up: its claim goes, and the readers it held back are told (1).
-- KEYS[1] the zset of waiting writers, KEYS[2] the lock channel; ARGV[1] the writer field,
-- ARGV[2] publish command. Reply: 1 when there was a claim, else 0 (and nothing is
-- published). Safe to repeat.
if redis.call('zrem', KEYS[1], ARGV[1]) == 1 then
    redis.call(ARGV[2], KEYS[2], 1)
    return 1
end
return 0
