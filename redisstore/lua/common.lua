-- common.lua: what the six algorithms share: exact integer arithmetic on
-- doubles, the clock, the per-policy parameters, usage tracking, TTLs and
-- the reply. Go twin: internal/algo (algo.go, gcra.go).
--
-- redisstore sends these files to Redis in two forms (scripts.go):
--   a function library (Redis ≥ 7.0): every file once, then one
--     redis.register_function per algorithm and per mode (decide, and peek
--     with the no-writes flag), group.lua's and batch.lua's (many decisions
--     in one call, for TakeBatch). The library's top level runs once per
--     FUNCTION LOAD, so the local functions below are created once per
--     node, not per call, and the parameter cache P lives across calls;
--   a script per algorithm and mode (EVALSHA, for servers without
--     functions): this file, the preludes its algorithm needs and its file,
--     then "return entry(<parse>, <decide>, <peek>)(KEYS, ARGV)". There
--     everything here is created anew on every call.
--
-- Every algorithm's function (see entry) is called as f(keys, args):
--   keys     the algorithm's state keys, all under the same hash tag (one
--            cluster slot), then, when the policy tracks usage, the usage
--            hash <prefix>:{<policy>:<key>}:u
--   args[1]  the policy's parameters, a string that never changes for a
--            policy: "<tag> <count_denied 0/1> <track> <retention µs>
--            <min TTL µs> <the algorithm's parameters…>" (see each file),
--            track being 0, 1, or 1:<resolution µs>:<retention µs> for a
--            usage series; parsed once and kept in P, keyed by the string
--            itself
--   args[2]  the call: n, the cost (1 to 2^53-1), as a little-endian
--            IEEE double (8 bytes), followed, when the caller gives the
--            time, by now in µs since the Unix epoch, also a double (16
--            bytes in all); with 8 bytes the function reads the server's
--            TIME
-- and peeks (decides, writes nothing) or decides, as registered.
-- Reply, with code = allowed (1/0) + 2 × the binding limit's index
-- (0-based; the limit itself the caller knows from the policy):
--   an allowed decision with remaining < 2^16 and reset_after < 2^32 µs
--     (71 minutes), most of them: one integer, code + 32 × (remaining +
--     2^16 × reset_after), below 2^53 (a table costs Redis more to build
--     and to reply than the rest of a decision's Lua);
--   any other: {code, remaining, retry_after µs (-1: never), reset_after
--     µs}, all integers.
-- An error reply "ERR floodgate: clock …" when the clock is outside 1970 to
-- 2155, where the arithmetic below is no longer exact.
--
-- Numbers here are IEEE doubles (Lua 5.1). Every integer kept is below
-- 2^53 and exact; products that may pass 2^53 go through muldivmod, and
-- counts or times that absurd costs recorded with count_denied push past
-- 2^53-1 saturate there, exactly as the Go twin does. Formatting a number
-- for Redis costs about as much as a redis.call's own work, so the code
-- sends as few as it can: a TTL that does not change is kept (KEEPTTL)
-- rather than sent again.
--
-- A Redis function's top level may only define: the standard libraries
-- (math, string, struct, …) are reached at call time, never here.

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

-- ttl_ms turns an absolute expiry (µs) into a PX argument: a string of
-- milliseconds, rounded up, at least 1, and at least the minimum TTL.
local function ttl_ms(expires, now, min_ttl)
  local us = expires - now
  if us < min_ttl then us = min_ttl end
  local ms = math.ceil(us / 1000)
  if ms < 1 then ms = 1 end
  return fmt(ms)
end

-- A batch's state cache. fixed_window, gcra, token_bucket and ar1 keep a
-- key's state in one string, read with GET and written with SET by their
-- decide(keys, p, now, n, peek, sc). No other client's command runs
-- within one FCALL, so the state a call of a batch (batch.lua) read or
-- wrote is what the batch's next call of that key would read: sc carries
-- it from call to call, and the writes go to Redis once, after the
-- batch's last call (state_flush). The calls of a key that several calls
-- of the batch share (a hot key's) so read its state once and write it
-- once, however many they are and whatever calls come between them; what
-- each decides is unchanged. The store marks those calls (redisstore's
-- joinBatch); the others get no sc and GET and SET as a call of their own
-- does, so that a batch of distinct keys pays only a test of sc. In
-- sc: v maps a key to its state (false: none), x a written key to the PX
-- argument to send (true: keep the key's TTL, KEEPTTL), and d lists the
-- written keys in the order of their first write.
local function state_get(sc, key)
  local v = sc.v[key]
  if v == nil then
    v = redis.call('GET', key)
    sc.v[key] = v
  end
  return v
end

-- state_set writes a key's state into sc: with px (ttl_ms's string) its
-- TTL, without it keeping the TTL the key has. A write without px after
-- one with px keeps that px, as KEEPTTL would keep the TTL that write set.
local function state_set(sc, key, v, px)
  local x = sc.x
  if x[key] == nil then
    sc.d[#sc.d + 1] = key
    x[key] = true
  end
  if px then x[key] = px end
  sc.v[key] = v
end

-- state_flush writes what a batch's calls wrote into sc, one SET a key.
local function state_flush(sc)
  local v, x, d = sc.v, sc.x, sc.d
  for i = 1, #d do
    local key = d[i]
    local px = x[key]
    if px == true then
      redis.call('SET', key, v[key], 'KEEPTTL')
    else
      redis.call('SET', key, v[key], 'PX', px)
    end
  end
end

-- HB is what the last decide left for a reservation's hold (SPEC.md,
-- "Reserve, settle, refund"): at, its now after rule 1; born, the state's
-- birth after the call (0 without a state); tq and tr, the Go twin's A
-- and B after the call: gcra's tat (µs, remainder), fixed_window's start
-- and count, token_bucket's creation and U (0 for the other algorithms). CAL holds the bounds b0..b3 of
-- the calendar fixed_window being decided (group.lua sets it).
local HB = {at = 0, born = 0, tq = 0, tr = 0}
local CAL = {0, 0, 0, 0}

-- P caches the parsed parameters of each policy by its parameter string
-- (args[1]), PN counts them: at most 1000, then P starts again, so a
-- stream of ever new policies cannot grow it without bound. In a script
-- both are new on every call.
local P, PN = {}, 0

-- fields splits a parameter string at its spaces.
local function fields(s)
  local f = {}
  for w in string.gmatch(s, '%S+') do f[#f + 1] = w end
  return f
end

-- params returns the parameters of args[1], parsing them with parse(f, p)
-- the first time: f the string's fields, p a table holding the common
-- ones (cd, track, retention, min_ttl) to which parse adds its own.
local function params(s, parse)
  local p = P[s]
  if p then return p end
  local f = fields(s)
  p = {cd = f[2] == '1', track = f[3] ~= '0', retention = tonumber(f[4]), min_ttl = tonumber(f[5])}
  local res, keep = string.match(f[3], '^1:(%d+):(%d+)$')
  if res then p.sres, p.skeep = tonumber(res), tonumber(keep) end
  parse(f, p)
  if PN >= 1000 then P, PN = {}, 0 end
  P[s], PN = p, PN + 1
  return p
end

-- W is the scratch list of HSET's arguments, reused across calls (in a
-- script it is new on each); wn counts those of this call.
local W, wn = {}, 0
local function w2(a, b)
  W[wn + 1], W[wn + 2] = a, b
  wn = wn + 2
end

-- track adds one add's usage to the hash key (SPEC.md "Per-key usage
-- metadata"): f first seen, l last seen (µs), r costs asked, d costs
-- denied, x when the usage expires (µs): the later of the state's expiry
-- and l + retention. Usage whose x has passed is gone, whether or not
-- Redis has deleted the hash yet (it has not when the caller's clock runs
-- ahead of the server's): the add starts it afresh. The key's TTL follows
-- x; listings also compare x with the store's clock, which may be the
-- caller's. Only the fields that change are written (f when the usage
-- starts, d on a denial), and x and the TTL only when x changes (or a
-- minimum TTL is set).
local function track(key, now, n, allowed, expires, p)
  local v = redis.call('HMGET', key, 'f', 'l', 'r', 'd', 'x')
  local dn = 0
  if not allowed then dn = n end
  local first, last, requests, denied = now, now, n, dn
  local x0 = tonumber(v[5])
  local live = x0 and x0 > now
  if live then
    last = tonumber(v[2]) or now
    if now > last then last = now end
    requests = satadd(tonumber(v[3]) or 0, n)
    denied = satadd(tonumber(v[4]) or 0, dn)
  end
  local x = expires
  if last + p.retention > x then x = last + p.retention end
  if x <= now then
    redis.call('DEL', key)
    return
  end
  wn = 0
  if not live then w2('f', fmt(first)) end
  w2('l', fmt(last))
  w2('r', fmt(requests))
  if dn > 0 or not live then w2('d', fmt(denied)) end
  local newx = x ~= x0 or not live or p.min_ttl > 0
  if newx then w2('x', fmt(x)) end
  redis.call('HSET', key, unpack(W, 1, wn))
  if newx then redis.call('PEXPIRE', key, ttl_ms(x, now, p.min_ttl)) end
end

-- A usage series (SPEC.md "Per-key usage series") lives in the same hash
-- as the totals, so that a decision still writes one key more than its
-- state, in one call:
--   s    the series' head, three or four little-endian doubles (24 or 32
--        bytes): the newest bucket's index k (it covers [k·g, (k+1)·g)
--        µs), its requests, g the resolution (µs) it was written at
--        (another policy's series is dropped by the next add), and its
--        denied when not 0
--   <c>  (a decimal integer) the older buckets of chunk c, the buckets
--        CHUNK·c to CHUNK·c + CHUNK − 1 that are not empty, oldest first,
--        each a byte (k − CHUNK·c), then requests and denied as unsigned
--        LEB128 varints (Go's binary.AppendUvarint): 3 to 5 bytes a bucket
--        for everyday counts, so that a chunk stays within
--        hash-max-listpack-value (64 bytes) and a dense day of minutes
--        keeps the hash a listpack of about 100 fields
-- An add to the newest bucket writes l, r (d when denied) and s, and x and
-- the TTL only when x changes. When a new bucket opens, the newest is
-- appended to its chunk (one HGET) if it still counts, and the chunks
-- whose every bucket stopped counting since the newest opened are deleted
-- (HDEL; those before were deleted when it opened). Listings and series queries read the hash whole (HGETALL) and
-- decode it in Go (redisstore/usage.go).
local CHUNK = 16

-- uvarint returns x (0 ≤ x ≤ 2^53-1) as an unsigned LEB128 varint.
local function uvarint(x)
  if x < 128 then return string.char(x) end
  local t = {}
  while x >= 128 do
    local b = x % 128
    t[#t + 1] = b + 128
    x = (x - b) / 128
  end
  t[#t + 1] = x
  return string.char(unpack(t))
end

-- track_series is track for a policy with a usage series: it also adds the
-- add to the bucket of its time, which is last seen (a clock that went back
-- records at the key's last add).
local function track_series(key, now, n, allowed, expires, p)
  local v = redis.call('HMGET', key, 'f', 'l', 'r', 'd', 'x', 's')
  local res, keep = p.sres, p.skeep
  local dn = 0
  if not allowed then dn = n end
  wn = 0
  local first, last, requests, denied = now, now, n, 0
  local b, q, e, g
  local x0 = tonumber(v[5])
  local live = x0 and x0 > now
  if live then
    last = tonumber(v[2]) or now
    if now > last then last = now end
    requests = satadd(tonumber(v[3]) or 0, n)
    denied = tonumber(v[4]) or 0
    local h = v[6]
    if h and #h == 24 then
      b, q, g = struct.unpack('<ddd', h)
      e = 0
    elseif h and #h == 32 then
      b, q, g, e = struct.unpack('<dddd', h)
    end
    if g ~= res then
      if g then
        -- Another resolution's series: dropped, the totals written again.
        redis.call('DEL', key)
        live = false
        first = tonumber(v[1]) or now
      end
      b = nil
    end
  elseif x0 then
    redis.call('DEL', key) -- expired, not deleted yet: start afresh
  end
  if not live then
    w2('f', fmt(first))
  end
  w2('l', fmt(last))
  w2('r', fmt(requests))
  if dn > 0 then
    denied = satadd(denied, dn)
    w2('d', fmt(denied))
  elseif not live then
    w2('d', fmt(denied))
  end
  local k = floordiv(last, res)
  if b == k then
    q = satadd(q, n)
    e = satadd(e, dn)
  else
    if b then
      local c = floordiv(b, CHUNK)
      if b * res + keep > last then
        -- The bucket still counts: pack it.
        local rec = string.char(b - c * CHUNK) .. uvarint(q) .. uvarint(e)
        local cur = redis.call('HGET', key, fmt(c))
        if cur then rec = cur .. rec end
        w2(fmt(c), rec)
      end
      -- The chunks before cmin(t) hold no bucket that counts at t. Those
      -- before cmin(b·g) went when b opened (at a time of bucket b), so
      -- the ones to delete now run from there.
      local cmin = floordiv(floordiv(last - keep, res) + 1, CHUNK)
      local from = floordiv(floordiv(b * res - keep, res) + 1, CHUNK)
      local to = math.min(cmin - 1, c)
      if to >= from then
        local dead = {}
        for i = from, to do dead[#dead + 1] = fmt(i) end
        redis.call('HDEL', key, unpack(dead))
      end
    end
    b, q, e = k, n, dn
  end
  if e > 0 then
    w2('s', struct.pack('<dddd', b, q, res, e))
  else
    w2('s', struct.pack('<ddd', b, q, res))
  end
  local x = expires
  if last + p.retention > x then x = last + p.retention end
  if k * res + keep > x then x = k * res + keep end
  local newx = x ~= x0 or not live or p.min_ttl > 0
  if newx then w2('x', fmt(x)) end
  redis.call('HSET', key, unpack(W, 1, wn))
  if newx then redis.call('PEXPIRE', key, ttl_ms(x, now, p.min_ttl)) end
end

-- entry returns the function of an algorithm, deciding or peeking: the
-- body every call runs, as f(keys, args) or, from batch.lua, f(keys, args,
-- clock, sc): clock[1] the server's clock (µs) that the batch's calls share,
-- read with TIME by the first call that needs it (nil until then), and
-- sc the batch's state cache (state_get) when the call's key is one that
-- other calls of the batch share, passed to decide. It
-- reads the parameters (parse(f, p) adds the algorithm's to p, and sets
-- p.nkeys, the number of state keys; the usage hash follows them) and the
-- call, checks the clock, lets the algorithm decide (decide(keys, p, now,
-- n, peek, sc) returns allowed, remaining, retry_after, reset_after, binding
-- and the state's expiry after the call, 0 for none), tracks usage and
-- replies. parse, decide and peek are upvalues, so a call goes through no
-- wrapper: function calls are a good part of what Lua costs here.
local function entry(parse, decide, peek)
  return function(keys, args, clock, sc)
    local p = P[args[1]]
    if not p then p = params(args[1], parse) end
    local call = args[2]
    local n, now
    if #call == 16 then
      n, now = struct.unpack('<dd', call)
    else
      n = struct.unpack('<d', call)
      now = clock and clock[1]
      if not now then
        local t = redis.call('TIME')
        now = t[1] * 1000000 + t[2]
        if clock then clock[1] = now end
      end
    end
    if now < 0 or now > MAXNOW then
      return redis.error_reply('ERR floodgate: clock reads ' .. fmt(now) .. ' µs, outside 1970 to 2155')
    end
    local allowed, remaining, retry, reset, binding, expires = decide(keys, p, now, n, peek, sc)
    if p.track and not peek then
      if p.sres then
        track_series(keys[p.nkeys + 1], now, n, allowed, expires, p)
      else
        track(keys[p.nkeys + 1], now, n, allowed, expires, p)
      end
    end
    local code = binding + binding
    if allowed then
      if remaining < 65536 and reset < 4294967296 then
        return code + 1 + 32 * (remaining + 65536 * reset)
      end
      code = code + 1
    end
    return {code, remaining, retry, reset}
  end
end

