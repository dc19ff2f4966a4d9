-- fixed_window.lua: SPEC.md "fixed_window". Go twin:
-- internal/algo/fixedwindow.go.
--
-- keys[1]  the state: the window's start, the count, t_last and born (µs)
--          as four little-endian doubles (struct '<dddd', 32 bytes: one
--          48-byte allocation in Redis). Its TTL is the window's end, set
--          when the window opens and kept (KEEPTTL) by the adds within it.
-- args[1]  "fw <common> <max> <window µs> <align: first, epoch or
--          calendar>": max an integer ≥ 0; a calendar window (window 0)
--          takes its window from CAL, the bounds the caller drew (SPEC.md,
--          "Calendar windows"), which group.lua checked cover now
-- Reply: see common.lua; binding is always 0.

local function fixed_window_parse(f, p)
  p.nkeys = 1
  p.max, p.w, p.first, p.cal = tonumber(f[6]), tonumber(f[7]), f[8] == 'first', f[8] == 'calendar'
end

-- cal_window returns the window of CAL that holds now, or nil.
local function cal_window(now)
  for i = 1, 3 do
    if CAL[i] <= now and now < CAL[i + 1] then return CAL[i], CAL[i + 1] end
  end
  return nil
end

local function fixed_window_decide(keys, p, now, n, peek, sc)
  local max, w = p.max, p.w
  local key = keys[1]
  local has, start, count, tlast, born = false, 0, 0, 0, 0
  local raw
  if sc then raw = state_get(sc, key) else raw = redis.call('GET', key) end
  if raw and #raw == 32 then
    has = true
    start, count, tlast, born = struct.unpack('<dddd', raw)
  end
  if has and now < tlast then now = tlast end -- rule 1: the clock went back

  local live, wend
  if p.cal then
    local ws, we = cal_window(now)
    live = has and start == ws
    start, wend = ws, we
  else
    live = has and now < start + w
    if not live then
      if p.first then start = now else start = now - now % w end
    end
    wend = start + w
  end
  if not live then count, born = 0, 0 end
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
    reset = wend - now
    expires = wend
  end
  local retry = 0
  if not allowed then
    if n > max then retry = -1 else retry = reset end
  end
  if record and not live then born = now end
  HB.at, HB.born, HB.tq, HB.tr = now, born, start, after
  if record and not peek then
    local v = struct.pack('<dddd', start, after, now, born)
    if live then
      -- the window, and so its end, is the same: KEEPTTL
      if sc then state_set(sc, key, v) else redis.call('SET', key, v, 'KEEPTTL') end
    else
      local px = ttl_ms(expires, now, p.min_ttl)
      if sc then state_set(sc, key, v, px) else redis.call('SET', key, v, 'PX', px) end
    end
  end
  return allowed, remaining, retry, reset, 0, expires
end

-- fixed_window_give gives back x units (SPEC.md, "Reserve, settle,
-- refund"): of the reservation hold (at, born) when given, else newest
-- first; nothing without a live state or into a state born after it. A
-- count brought to 0 leaves no state.
local function fixed_window_give(keys, p, now, x, hold)
  local key = keys[1]
  local raw = redis.call('GET', key)
  if not raw or #raw ~= 32 then return end
  local start, count, tlast, born = struct.unpack('<dddd', raw)
  if now < tlast then now = tlast end
  local live
  if p.cal then
    live = cal_window(now) == start
  else
    live = now < start + p.w
  end
  if not live or (hold and hold.born ~= born) then return end
  if x >= count then
    redis.call('DEL', key)
    return
  end
  redis.call('SET', key, struct.pack('<dddd', start, count - x, now, born), 'KEEPTTL')
end
