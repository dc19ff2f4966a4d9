-- fixed_window.lua: SPEC.md "fixed_window". Go twin:
-- internal/algo/fixedwindow.go.
--
-- keys[1]  the state: the window's start, the count and t_last (µs) as
--          three little-endian doubles (struct '<ddd', 24 bytes: one
--          48-byte allocation in Redis). Its TTL is the window's end, set
--          when the window opens and kept (KEEPTTL) by the adds within it.
-- args[1]  "fw <common> <max> <window µs> <align: first or epoch>": max an
--          integer ≥ 0
-- Reply: see common.lua; binding is always 0.

local function fixed_window_parse(f, p)
  p.nkeys = 1
  p.max, p.w, p.first = tonumber(f[6]), tonumber(f[7]), f[8] == 'first'
end

local function fixed_window_decide(keys, p, now, n, peek)
  local max, w = p.max, p.w
  local key = keys[1]
  local has, start, count, tlast = false, 0, 0, 0
  local raw = redis.call('GET', key)
  if raw and #raw == 24 then
    has = true
    start, count, tlast = struct.unpack('<ddd', raw)
  end
  if has and now < tlast then now = tlast end -- rule 1: the clock went back

  local live = has and now < start + w
  if not live then
    count = 0
    if p.first then start = now else start = now - now % w end
  end
  local allowed = n <= max - count
  local record = allowed or p.cd
  local after = count
  if record then
    after = count + n
    if after > MAXS then after = MAXS end -- satadd, inline
  end
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
    local v = struct.pack('<ddd', start, after, now)
    if live then
      redis.call('SET', key, v, 'KEEPTTL') -- the window, and so its end, is the same
    else
      redis.call('SET', key, v, 'PX', ttl_ms(expires, now, p.min_ttl))
    end
  end
  return allowed, remaining, retry, reset, 0, expires
end
