-- counter.lua: a refund to a counter (SPEC.md, "Counters"), the one
-- operation on a counter that native commands cannot make atomically.
-- Its adds and peeks are native commands redisstore sends itself
-- (counter.go: INCRBY and PEXPIRE, GET); its Go twin is the fixed
-- window's refund (internal/algo), as the counters' vectors check.
--
-- keys[1]  the counter: a Redis integer, the count of one window, which
--          expires at the window's end
-- args[1]  n, the units given back (1 to 2^53-1), a decimal integer
-- Reply: the count after, an integer. A count past 2^53-1 (denied costs
-- are counted) is taken as 2^53-1, the Go twin's saturated count; a
-- counter brought to 0 is deleted, any other keeps its TTL.

local function counter_refund(keys, args)
  local c = tonumber(redis.call('GET', keys[1]) or '0')
  local n = tonumber(args[1])
  if c > 9007199254740991 then c = 9007199254740991 end
  if c <= n then
    if c > 0 then redis.call('DEL', keys[1]) end
    return 0
  end
  c = c - n
  redis.call('SET', keys[1], string.format('%d', c), 'KEEPTTL')
  return c
end
