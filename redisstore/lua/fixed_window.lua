-- fixed_window.lua: SPEC.md "fixed_window". Go twin:
-- internal/algo/fixedwindow.go.
--
-- KEYS[2]  the state: the window's start, the count and t_last (µs), in
--          the smallest form that holds them (see compact.lua), so that
--          an int-encoded value is the common case:
--            "-<t_last><count>"  the window opened at t_last (align first,
--                                or epoch on a window boundary), count ≤ 999
--            "<t_last><count>"   the window is the epoch window holding
--                                t_last (t_last - t_last mod window)
--            21 bytes            start, count, t_last: 7 bytes each
--          and, as written before (still read): "<start> <count> <t_last>"
-- ARGV[8]  max, an integer ≥ 0
-- ARGV[9]  window, µs
-- ARGV[10] align: "first" or "epoch"
-- Reply: see common.lua; binding is always 0.

-- readstate returns whether raw holds a state, and its start, count and
-- t_last.
local function readstate(raw, w)
  local neg, l, k = readint(raw)
  if l then
    if neg then return true, l, k, l end
    return true, l - l % w, k, l
  end
  if isbinary(raw, 3) then
    return true, unpack7(raw, 1), unpack7(raw, 8), unpack7(raw, 15)
  end
  local s, c, t = string.match(raw, '^(%-?%d+) (%d+) (%-?%d+)$')
  if s then return true, tonumber(s), tonumber(c), tonumber(t) end
  return false, 0, 0, 0
end

-- state returns the stored form of (start, count, t_last); the integer
-- forms only when reading them back gives exactly these numbers.
local function state(start, count, tlast, w)
  if count <= 999 then
    if start == tlast then return intstate(true, tlast, count) end
    if start == tlast - tlast % w then return intstate(false, tlast, count) end
  end
  return pack(start, count, tlast)
end

local function decide(now, n, peek, cd, a, min_ttl)
  local max, w, first = tonumber(a[1]), tonumber(a[2]), a[3] == 'first'
  local key = KEYS[2]
  local has, start, count, tlast = false, 0, 0, 0
  local raw = redis.call('GET', key)
  if raw then has, start, count, tlast = readstate(raw, w) end
  if has and now < tlast then now = tlast end -- rule 1: the clock went back

  local live = has and now < start + w
  if not live then
    count = 0
    if first then start = now else start = now - now % w end
  end
  local allowed = n <= max - count
  local record = allowed or cd
  local after = count
  if record then after = satadd(count, n) end
  local remaining = max - after
  if remaining < 0 then remaining = 0 end
  local reset, expires = 0, 0
  if live or record then
    reset = start + w - now
    expires = start + w
  end
  local retry = 0
  if not allowed then
    if n > max then retry = -1 else retry = reset end
  end
  if record and not peek then
    redis.call('SET', key, state(start, after, now, w), 'PX', ttl_ms(expires, now, min_ttl))
  end
  return allowed, max, remaining, retry, reset, 0, expires
end

return run(decide)
