-- ar1.lua: SPEC.md "ar1", rule 11. Go twin: internal/algo/ar1.go.
--
-- Each limit keeps a slot s0 and a float count C0; at slot s the count is
-- C0 / d^(s - s0), d^k by binary exponentiation (the same multiplications
-- as the Go twin, so the same bits), and 0 below 1e-6.
--
-- keys[1]  the state: t_last and born (µs), then per limit its resolution
--          (µs), s0 and C0, all little-endian doubles (struct '<d…', 16 +
--          24 bytes per limit; doubles hold C0 exactly). A state whose resolutions
--          differ from the policy's is ignored.
-- args[1]  "ar <common>" then per limit three values: max (a number),
--          decay (> 1), resolution (µs)
-- Reply: see common.lua; binding is the 0-based index of the binding limit.

local function ar1_parse(f, p)
  local limits = {}
  for i = 6, #f, 3 do
    limits[#limits + 1] = {max = tonumber(f[i]), decay = tonumber(f[i + 1]), res = tonumber(f[i + 2])}
  end
  p.limits, p.nkeys = limits, 1
  p.format = '<' .. string.rep('d', 2 + 3 * #limits)
end

local function powint(d, k)
  local result = 1.0
  while k > 0 do
    if k % 2 == 1 then result = result * d end
    k = math.floor(k / 2)
    if k > 0 then d = d * d end
  end
  return result
end

local function decayed(c, d, k)
  if k > 0 then c = c / powint(d, k) end
  if c < ZERO_BELOW then return 0 end
  return c
end

-- first_slot: the smallest j ≥ 1 with c/d^j < 1e-6 or c/d^j + n ≤ quota
-- (quota < 0: the first test only), from the logarithmic estimate.
local function first_slot(c, d, n, quota)
  local function at(j)
    local v = c / powint(d, j)
    return v < ZERO_BELOW or v + n <= quota
  end
  local target = ZERO_BELOW
  if quota - n > target then target = quota - n end
  local j = 1
  if c > target then
    local est = math.log(c / target) / math.log(d)
    if est > 1 then j = math.floor(est) end
  end
  while j > 1 and at(j - 1) do j = j - 1 end
  while not at(j) do j = j + 1 end
  return j
end

-- slot_end is (slot + j)·res, saturating at MAXS.
local function slot_end(slot, j, res)
  if j > floordiv(MAXS, res) - slot then return MAXS end
  return (slot + j) * res
end

local function ar1_decide(keys, p, now, n, peek, sc)
  local limits = p.limits
  local key = keys[1]
  local has, tlast, born, slots, cs = false, 0, 0, {}, {}
  local raw
  if sc then raw = state_get(sc, key) else raw = redis.call('GET', key) end
  if raw and #raw == 8 * (2 + 3 * #limits) then
    local v = {struct.unpack(p.format, raw)}
    has, tlast, born = true, v[1], v[2]
    for i, l in ipairs(limits) do
      if v[3 * i] ~= l.res then has = false end
      slots[i], cs[i] = v[3 * i + 1], v[3 * i + 2]
    end
  end
  if has and now < tlast then now = tlast end -- rule 1

  -- Pass 1: decayed counts and the verdict.
  local counts = {}
  local allowed, live = true, false
  for i, l in ipairs(limits) do
    local c = 0
    if has then c = decayed(cs[i], l.decay, floordiv(now, l.res) - slots[i]) end
    counts[i] = c
    if c > 0 then live = true end
    if c + n > l.max then allowed = false end
  end
  local record = allowed or p.cd
  if not live then born = 0 end
  if record and not live then born = now end
  HB.at, HB.born, HB.tq, HB.tr = now, born, 0, 0

  -- Pass 2: on the counts after the call.
  local remaining, binding, bind_rem = 0, -1, 0
  local reset, retry = 0, 0
  for i, l in ipairs(limits) do
    local slot = floordiv(now, l.res)
    local c = counts[i]
    if record then c = c + n end
    local rem = 0
    if l.max - c > 0 then rem = math.floor(l.max - c) end
    if i == 1 or rem < remaining then remaining = rem end
    local denies = counts[i] + n > l.max
    if (allowed or denies) and (binding < 0 or rem < bind_rem) then binding, bind_rem = i - 1, rem end
    if c > 0 then
      local e = slot_end(slot, first_slot(c, l.decay, 0, -1), l.res) - now
      if e > reset then reset = e end
    end
    if not allowed then
      local wait
      if c + n <= l.max then
        wait = 0
      elseif n > l.max then
        wait = -1
      else
        wait = slot_end(slot, first_slot(c, l.decay, n, l.max), l.res) - now
      end
      if retry < 0 or wait < 0 then retry = -1 elseif wait > retry then retry = wait end
    end
  end

  local expires = 0
  if record and not peek then
    local out = {now, born}
    for i, l in ipairs(limits) do
      out[#out + 1] = l.res
      out[#out + 1] = floordiv(now, l.res)
      out[#out + 1] = counts[i] + n
    end
    expires = now + reset
    local v, px = struct.pack(p.format, unpack(out)), ttl_ms(expires, now, p.min_ttl)
    if sc then state_set(sc, key, v, px) else redis.call('SET', key, v, 'PX', px) end
  elseif record or has then
    -- a peek previews the recording add; an unchanged state empties when
    -- its counts do
    expires = now + reset
  end
  return allowed, remaining, retry, reset, binding, expires
end

-- ar1_give: each limit's count loses x as it weighs now: x·decay^-(s -
-- s_at) for a settle, x for a refund; 0 below 1e-6, and no state when
-- every count is 0.
local function ar1_give(keys, p, now, x, hold)
  local limits = p.limits
  local key = keys[1]
  local raw = redis.call('GET', key)
  if not raw or #raw ~= 8 * (2 + 3 * #limits) then return end
  local v = {struct.unpack(p.format, raw)}
  local tlast, born = v[1], v[2]
  for i, l in ipairs(limits) do
    if v[3 * i] ~= l.res then return end
  end
  if now < tlast then now = tlast end
  local live = false
  for i, l in ipairs(limits) do
    if decayed(v[3 * i + 2], l.decay, floordiv(now, l.res) - v[3 * i + 1]) > 0 then live = true end
  end
  if not live or (hold and hold.born ~= born) then return end
  local out, reset = {now, born}, 0
  for i, l in ipairs(limits) do
    local slot = floordiv(now, l.res)
    local c = decayed(v[3 * i + 2], l.decay, slot - v[3 * i + 1])
    local give = x
    if hold then
      local k = slot - floordiv(hold.at, l.res)
      if k > 0 then give = give / powint(l.decay, k) end
    end
    c = c - give
    if c < ZERO_BELOW then c = 0 end
    out[#out + 1] = l.res
    out[#out + 1] = slot
    out[#out + 1] = c
    if c > 0 then
      local e = slot_end(slot, first_slot(c, l.decay, 0, -1), l.res) - now
      if e > reset then reset = e end
    end
  end
  if reset == 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('SET', key, struct.pack(p.format, unpack(out)), 'PX', ttl_ms(now + reset, now, p.min_ttl))
end
