-- ar1.lua: SPEC.md "ar1", rule 11. Go twin: internal/algo/ar1.go.
--
-- Each limit keeps a slot s0 and a float count C0; at slot s the count is
-- C0 / d^(s - s0), d^k by binary exponentiation (the same multiplications
-- as the Go twin, so the same bits), and 0 below 1e-6.
--
-- KEYS[2]  the state, a string "<t_last µs> <shape> <s0> <C0> <s0> <C0> …",
--          one pair per limit; shape is the limits' resolutions, comma
--          separated: a state of another shape is ignored. Counts are
--          written with %.17g, which reads back to the same double.
-- ARGV[8…] per limit, three values: max (a number), decay (> 1),
--          resolution (µs)
-- Reply: see common.lua; binding is the 0-based index of the binding limit.

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

local function decide(now, n, peek, cd, a, min_ttl)
  local limits = {}
  local shape = {}
  for i = 1, #a, 3 do
    local l = {max = tonumber(a[i]), decay = tonumber(a[i + 1]), res = tonumber(a[i + 2])}
    limits[#limits + 1] = l
    shape[#shape + 1] = a[i + 2]
  end
  shape = table.concat(shape, ',')
  local key = KEYS[2]
  local has, tlast, slots, cs = false, 0, {}, {}
  local raw = redis.call('GET', key)
  if raw then
    local parts = {}
    for p in string.gmatch(raw, '%S+') do parts[#parts + 1] = p end
    if parts[2] == shape and #parts == 2 + 2 * #limits then
      has, tlast = true, tonumber(parts[1])
      for i = 1, #limits do
        slots[i], cs[i] = tonumber(parts[1 + 2 * i]), tonumber(parts[2 + 2 * i])
      end
    end
  end
  if has and now < tlast then now = tlast end -- rule 1

  -- Pass 1: decayed counts and the verdict.
  local counts = {}
  local allowed = true
  for i, l in ipairs(limits) do
    local c = 0
    if has then c = decayed(cs[i], l.decay, floordiv(now, l.res) - slots[i]) end
    counts[i] = c
    if c + n > l.max then allowed = false end
  end
  local record = allowed or cd

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
  local limit = limits[binding + 1].max

  local expires = 0
  if record and not peek then
    local out = {fmt(now), shape}
    for i, l in ipairs(limits) do
      out[#out + 1] = fmt(floordiv(now, l.res))
      out[#out + 1] = string.format('%.17g', counts[i] + n)
    end
    expires = now + reset
    redis.call('SET', key, table.concat(out, ' '), 'PX', ttl_ms(expires, now, min_ttl))
  elseif record then
    expires = now + reset
  elseif has then
    -- unchanged state: it empties when its counts do
    expires = now + reset
  end
  return allowed, math.floor(limit), remaining, retry, reset, binding, expires
end

return run(decide)
