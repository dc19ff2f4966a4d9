-- common.lua: the prelude every floodgate script starts with (redisstore
-- concatenates it, the preludes an algorithm also needs — lists.lua for
-- sliding_window and sliding_log, compact.lua for gcra and fixed_window —
-- and the algorithm's file). It holds what the six scripts share: the
-- clock, exact integer arithmetic on doubles, usage tracking, TTLs and the
-- reply. Go twin: internal/algo (algo.go, gcra.go).
--
-- Common KEYS (every script):
--   KEYS[1]  usage hash <prefix>:{<policy>:<key>}:u (written only when tracking)
--   KEYS[2…] the algorithm's state keys, same hash tag, so one cluster slot
-- Common ARGV (every script):
--   ARGV[1]  now, µs since the Unix epoch; "" reads the server's TIME
--   ARGV[2]  n, the cost, 1 to 2^53-1
--   ARGV[3]  "1" for a peek (decide, write nothing), else "0"
--   ARGV[4]  "1" when the policy counts denied adds (count_denied), else "0"
--   ARGV[5]  "1" when the policy tracks usage, else "0"
--   ARGV[6]  usage retention, µs (0: as long as the state)
--   ARGV[7]  minimum TTL of written keys, µs (0: the state's own horizon)
--   ARGV[8…] the algorithm's parameters (see its file)
-- Reply: {allowed (1/0), limit, remaining, retry_after µs (-1: never),
--         reset_after µs, binding limit index (0-based)}, all integers;
--         an error reply "ERR floodgate: clock …" when the clock is outside
--         1970 to 2155, where the arithmetic below is no longer exact.
--
-- Numbers here are IEEE doubles (Lua 5.1). Every integer kept is below
-- 2^53 and exact; products that may pass 2^53 go through muldivmod, and
-- counts or times that absurd costs recorded with count_denied push past
-- 2^53-1 saturate there, exactly as the Go twin does.

local MAXS = 9007199254740991 -- 2^53-1, the Go twin's satMax
local MAXNOW = 5853599254740991 -- algo.MaxNow: MAXS less 100 years of µs
local ZERO_BELOW = 1e-6 -- ar1: a count below this is 0

-- satadd returns a+b for 0 ≤ a, b ≤ MAXS, saturating at MAXS. A true sum
-- above MAXS rounds to at least 2^53, so the comparison is exact.
local function satadd(a, b)
  local s = a + b
  if s > MAXS then return MAXS end
  return s
end

-- floordiv returns ⌊a/b⌋ for |a| < 2^53 and b ≥ 1: the division's rounding
-- never crosses an integer below 2^53.
local function floordiv(a, b)
  return math.floor(a / b)
end

-- fmt writes an integer exactly (tostring would use %.14g).
local function fmt(x)
  return string.format('%d', x)
end

-- Split arithmetic. A 53-bit integer is three limbs of 2^18; a product of
-- two is six limbs, each column sum below 2^38.
local L = 262144 -- 2^18

local function limbs3(a)
  local a0 = a % L
  local rest = (a - a0) / L
  local a1 = rest % L
  return a0, a1, (rest - a1) / L
end

-- muladddivmod returns q = ⌊(a·b + d)/c⌋ and (a·b + d) mod c exactly, for
-- integers 0 ≤ a, b, d ≤ MAXS and 1 ≤ c ≤ MAXS; a quotient of MAXS or more
-- saturates to (MAXS, 0), as mulDivMod does in Go.
local function muladddivmod(a, b, d, c)
  local p = a * b
  if p < 9007199254740992 and d <= MAXS - p then
    local s = p + d -- exact: below 2^53
    local q = math.floor(s / c)
    if q >= MAXS then return MAXS, 0 end
    return q, s - q * c
  end
  -- a·b + d as six limbs of 2^18, least significant first.
  local a0, a1, a2 = limbs3(a)
  local b0, b1, b2 = limbs3(b)
  local d0, d1, d2 = limbs3(d)
  local col = {a0 * b0 + d0, a0 * b1 + a1 * b0 + d1, a0 * b2 + a1 * b1 + a2 * b0 + d2,
               a1 * b2 + a2 * b1, a2 * b2, 0}
  for i = 1, 5 do
    local lo = col[i] % L
    col[i + 1] = col[i + 1] + (col[i] - lo) / L
    col[i] = lo
  end
  -- Binary long division, most significant bit first. The remainder r
  -- stays below c ≤ MAXS; 2r + bit is never formed when it could pass
  -- 2^53: compare r with c - r - bit instead.
  local q, r = 0, 0
  for i = 6, 1, -1 do
    local limb = col[i]
    for j = 17, 0, -1 do
      local bit = math.floor(limb / 2 ^ j) % 2
      q = q * 2
      if r >= c - r - bit then
        r = r - (c - r - bit)
        q = q + 1
      else
        r = r + r + bit
      end
      if q >= MAXS then return MAXS, 0 end
    end
  end
  return q, r
end

local function muldivmod(a, b, c)
  return muladddivmod(a, b, 0, c)
end

-- The clock: the caller's µs, or the server's TIME.
local function clock(arg)
  if arg == '' then
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return tonumber(arg)
end

-- ttl_ms turns an absolute expiry (µs) into a PEXPIRE argument, rounded up
-- to the millisecond, at least 1, and at least the minimum TTL.
local function ttl_ms(expires, now, min_ttl)
  local us = expires - now
  if us < min_ttl then us = min_ttl end
  local ms = math.ceil(us / 1000)
  if ms < 1 then ms = 1 end
  return ms
end

-- track adds one add's usage to the hash key (SPEC.md "Per-key usage
-- metadata"): f first seen, l last seen (µs), r costs asked, d costs
-- denied, x when the usage expires (µs): the later of the state's expiry
-- and l + retention. The key's TTL follows x; listings also compare x
-- with the store's clock, which may be the caller's.
local function track(key, now, n, allowed, expires, retention, min_ttl)
  local v = redis.call('HMGET', key, 'f', 'l', 'r', 'd')
  local first = tonumber(v[1]) or now
  local last = tonumber(v[2]) or now
  if now > last then last = now end
  local requests = satadd(tonumber(v[3]) or 0, n)
  local denied = tonumber(v[4]) or 0
  if not allowed then denied = satadd(denied, n) end
  local x = expires
  if last + retention > x then x = last + retention end
  if x <= now then
    redis.call('DEL', key)
    return
  end
  redis.call('HSET', key, 'f', fmt(first), 'l', fmt(last), 'r', fmt(requests), 'd', fmt(denied), 'x', fmt(x))
  redis.call('PEXPIRE', key, ttl_ms(x, now, min_ttl))
end

-- run is every script's body: it reads the common ARGV, checks the clock,
-- lets the algorithm decide (decide(now, n, peek, count_denied, params,
-- min_ttl) returns allowed, limit, remaining, retry_after, reset_after,
-- binding and the state's expiry after the call, 0 for none), tracks usage
-- and replies.
local function run(decide)
  local now = clock(ARGV[1])
  if now < 0 or now > MAXNOW then
    return redis.error_reply('ERR floodgate: clock reads ' .. fmt(now) .. ' µs, outside 1970 to 2155')
  end
  local n = tonumber(ARGV[2])
  local peek = ARGV[3] == '1'
  local cd = ARGV[4] == '1'
  local min_ttl = tonumber(ARGV[7])
  local params = {}
  for i = 8, #ARGV do params[#params + 1] = ARGV[i] end
  local allowed, limit, remaining, retry, reset, binding, expires = decide(now, n, peek, cd, params, min_ttl)
  if ARGV[5] == '1' and not peek then
    track(KEYS[1], now, n, allowed, expires, tonumber(ARGV[6]), min_ttl)
  end
  local a = 0
  if allowed then a = 1 end
  return {a, limit, remaining, retry, reset, binding}
end
