-- token_bucket.lua: SPEC.md "token_bucket", rule 6. Go twin:
-- internal/algo/tokenbucket.go.
--
-- The Go twin keeps U = tokens × window_µs as one integer; here U is the
-- pair (Q, R) with U = Q·window + R and 0 ≤ R < window, so that no stored
-- number passes 2^53: Q is a whole token count (negative with count_denied,
-- never below -(limit - burst)), R the fraction of a token in 1/window.
-- U ≥ n·window exactly when Q ≥ n.
--
-- keys[1]  the state: created, t_last (µs), Q, R, the window (µs) and
--          born (µs) as six signed 7-byte big-endian integers (struct, 42
--          bytes); a state written under another window is ignored
-- args[1]  "tb <common> <limit> <window µs> <burst>": limit ≥ 1, burst 1
--          to limit
-- Reply: see common.lua; binding is always 0.

local function token_bucket_parse(f, p)
  p.nkeys = 1
  p.limit, p.w, p.burst = tonumber(f[6]), tonumber(f[7]), tonumber(f[8])
end

local function token_bucket_decide(keys, p, now, n, peek, sc)
  local limit, w, burst = p.limit, p.w, p.burst
  local rate = limit - burst -- U gained per µs
  local key = keys[1]
  local has, created_s, tlast, Q, R, born = false, 0, 0, 0, 0, 0
  local raw
  if sc then raw = state_get(sc, key) else raw = redis.call('GET', key) end
  if raw and #raw == 42 then
    local c, l, q, r, sw, b = struct.unpack('>i7i7i7i7i7i7', raw)
    if sw == w then has, created_s, tlast, Q, R, born = true, c, l, q, r, b end
  end
  if has and now < tlast then now = tlast end -- rule 1

  local created, q, r = now, burst, 0 -- a fresh bucket: full
  local live = has and now < created_s + w
  if not live then born = 0 end
  if live then
    created = created_s
    -- refill (now - t_last)·rate, capped at burst tokens
    local dq, dr = muldivmod(now - tlast, rate, w)
    q, r = Q + dq, R + dr
    if r >= w then q, r = q + 1, r - w end
    if q > burst or (q == burst and r > 0) then q, r = burst, 0 end
  end

  local allowed = n <= burst and q >= n
  local record = allowed or p.cd
  local aq, ar = q, r
  if record then
    if n > q + rate then
      aq, ar = -rate, 0 -- the clamp: no decision can tell lower U apart
    else
      aq = q - n
    end
  end
  local remaining = aq
  if remaining < 0 then remaining = 0 end
  local reset, expires = 0, 0
  if live or record then
    reset = created + w - now
    expires = created + w
  end
  local retry = 0
  if not allowed then
    if n > burst then
      retry = -1
    elseif rate == 0 then
      retry = reset
    else
      -- ⌈(n·w - U)/rate⌉ with n·w - U = (n - aq - 1)·w + (w - ar) > 0
      local wq, wr = muladddivmod(n - aq - 1, w, w - ar, rate)
      if wr > 0 then wq = wq + 1 end
      retry = wq
      if reset < retry then retry = reset end
    end
  end
  if record and not live then born = now end
  HB.at, HB.born, HB.tq, HB.tr = now, born, created, aq * w + ar
  if record and not peek then
    local v = struct.pack('>i7i7i7i7i7i7', created, now, aq, ar, w, born)
    if live then
      -- the state expires when created + window: KEEPTTL
      if sc then state_set(sc, key, v) else redis.call('SET', key, v, 'KEEPTTL') end
    else
      local px = ttl_ms(expires, now, p.min_ttl)
      if sc then state_set(sc, key, v, px) else redis.call('SET', key, v, 'PX', px) end
    end
  end
  return allowed, remaining, retry, reset, 0, expires
end

-- token_bucket_give: refill to now, add x tokens, cap at burst; the
-- state keeps its lifetime even when full.
local function token_bucket_give(keys, p, now, x, hold)
  local w, burst = p.w, p.burst
  local key = keys[1]
  local raw = redis.call('GET', key)
  if not raw or #raw ~= 42 then return end
  local created, tlast, Q, R, sw, born = struct.unpack('>i7i7i7i7i7i7', raw)
  if sw ~= w then return end
  if now < tlast then now = tlast end
  if now >= created + w or (hold and hold.born ~= born) then return end
  local dq, dr = muldivmod(now - tlast, p.limit - burst, w)
  local q, r = Q + dq, R + dr
  if r >= w then q, r = q + 1, r - w end
  if q > burst or (q == burst and r > 0) then q, r = burst, 0 end
  if x >= burst - q then q, r = burst, 0 else q = q + x end
  redis.call('SET', key, struct.pack('>i7i7i7i7i7i7', created, now, q, r, w, born), 'KEEPTTL')
end
