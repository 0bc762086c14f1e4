-- A waiting writer gives up: its claim goes, and the readers it held back are told (1);
-- with no claim, nothing is published. Keys, arguments and reply: lua.WriteLeave
-- (calls.go). Safe to repeat.
if redis.call('zrem', KEYS[1], ARGV[1]) == 1 then
    redis.call(ARGV[2], KEYS[2], 1)
    return 1
end
return 0
