-- sliding_window.lua: SPEC.md "sliding_window", rules 3 and 4. Go twin:
-- internal/algo/slidingwindow.go (and log.go for the lists).
--
-- Per limit, the buckets (index k = ⌊t/resolution⌋, cost) of a list, oldest
-- first; bucket k counts while now < k·resolution + window.
--
-- keys[1]      the state hash: l = t_last µs, b = born µs, s = shape ("res:win,…" in
--              µs; a state of another shape is dropped), t<i> = the running
--              sum of list i (-1: recount from the list)
-- keys[2…]     one list per limit, in policy order, entries "<k> <cost>"
-- args[1]      "sw <common>" then per limit three values: max, window µs,
--              resolution µs
-- Reply: see common.lua; binding is the 0-based index of the binding limit.
-- Every key written gets the TTL of the state's newest bucket expiry.

local function sliding_window_parse(f, p)
  local limits, shape = {}, {}
  for i = 6, #f, 3 do
    limits[#limits + 1] = {max = tonumber(f[i]), win = tonumber(f[i + 1]), res = tonumber(f[i + 2]), t = 't' .. (#limits + 1)}
    shape[#shape + 1] = f[i + 2] .. ':' .. f[i + 1]
  end
  p.limits, p.shape, p.nkeys = limits, table.concat(shape, ','), 1 + #limits
end

local function sliding_window_decide(keys, p, now, n, peek)
  local limits, shape, cd = p.limits, p.shape, p.cd
  local hkey = keys[1]
  local h = redis.call('HGETALL', hkey)
  local f = {}
  for i = 1, #h, 2 do f[h[i]] = h[i + 1] end
  local has = f.s == shape
  if has and now < tonumber(f.l) then now = tonumber(f.l) end -- rule 1

  -- Pass 1: counts and the verdict.
  local totals, ks, gones, counts = {}, {}, {}, {}
  local allowed = true
  for i, l in ipairs(limits) do
    if has then
      ks[i], gones[i], counts[i], totals[i] = list_count(keys[1 + i], tonumber(f[l.t]) or 0, l.res, l.win, now)
    else
      ks[i], gones[i], counts[i], totals[i] = 0, 0, 0, 0
    end
    if n > l.max - counts[i] then allowed = false end
  end
  local record = allowed or cd
  local live, born = false, 0
  for i = 1, #limits do
    if counts[i] > 0 then live = true end
  end
  if live then born = tonumber(f.b) or 0 end
  if record and not live then born = now end
  HB.at, HB.born, HB.tq, HB.tr = now, born, 0, 0

  -- Pass 2: on the state after the call.
  local remaining, binding, bind_rem, reset, retry = 0, -1, 0, 0, 0
  for i, l in ipairs(limits) do
    local lkey = keys[1 + i]
    local after = counts[i]
    if record then after = satadd(after, n) end
    local rem = l.max - after
    if rem < 0 then rem = 0 end
    if i == 1 or rem < remaining then remaining = rem end
    local denies = n > l.max - counts[i]
    if (allowed or denies) and (binding < 0 or rem < bind_rem) then binding, bind_rem = i - 1, rem end
    local current = floordiv(now, l.res) * l.res + l.win -- the current bucket's expiry
    if record then
      if current - now > reset then reset = current - now end
    elseif has then
      local t = list_newest(lkey)
      if t and t * l.res + l.win - now > reset then reset = t * l.res + l.win - now end
    end
    if not allowed then
      local wait
      if n <= l.max - after then
        wait = 0
      elseif n > l.max then
        wait = -1
      else
        local pending = 0
        if record then pending = n end
        if has then
          wait = list_wait(lkey, ks[i], l.res, l.win, l.max - n, pending, current, now) - now
        elseif pending > l.max - n then
          wait = current - now
        else
          wait = 0
        end
      end
      if retry < 0 or wait < 0 then retry = -1 elseif wait > retry then retry = wait end
    end
  end

  local expires = 0
  if has or record then expires = now + reset end
  if record and not peek then
    if not has then
      local stale = {hkey}
      for i = 1, #limits do stale[#stale + 1] = keys[1 + i] end
      redis.call('DEL', unpack(stale))
    end
    local out = {'l', fmt(now), 'b', fmt(born), 's', shape}
    for i, l in ipairs(limits) do
      local total = list_record(keys[1 + i], ks[i], gones[i], totals[i], floordiv(now, l.res), n)
      out[#out + 1] = l.t
      out[#out + 1] = fmt(total)
    end
    redis.call('HSET', hkey, unpack(out))
    local ttl = ttl_ms(expires, now, p.min_ttl)
    redis.call('PEXPIRE', hkey, ttl)
    for i = 1, #limits do redis.call('PEXPIRE', keys[1 + i], ttl) end
  end
  return allowed, remaining, retry, reset, binding, expires
end

-- list_take takes up to x units from the live entries of the list key
-- after the first k expired ones: a settle from the entry whose T is at,
-- a refund (at nil) newest first. It returns what it took and whether it
-- visited an entry; entries brought to 0 are removed.
local function list_take(key, k, x, at)
  local items = redis.call('LRANGE', key, k, -1)
  local took, visited = 0, false
  for j = #items, 1, -1 do
    if took >= x then break end
    local t, n = list_item(items[j])
    if at then
      if t < at then break end
    end
    if not at or t == at then
      visited = true
      local g = x - took
      if g > n then g = n end
      took = took + g
      if n - g == 0 then
        redis.call('LSET', key, k + j - 1, '-')
        redis.call('LREM', key, 1, '-')
      else
        redis.call('LSET', key, k + j - 1, fmt(t) .. ' ' .. fmt(n - g))
      end
      if at then break end
    end
  end
  return took, visited
end

-- sliding_window_give: per limit, a settle takes from the reservation's
-- bucket if it still counts, a refund from the newest counting bucket
-- back; the keys then expire with the newest bucket left, or go.
local function sliding_window_give(keys, p, now, x, hold)
  local limits = p.limits
  local hkey = keys[1]
  local h = redis.call('HGETALL', hkey)
  local f = {}
  for i = 1, #h, 2 do f[h[i]] = h[i + 1] end
  if f.s ~= p.shape then return end
  if now < tonumber(f.l) then now = tonumber(f.l) end
  local ks, live = {}, false
  for i, l in ipairs(limits) do
    local k, _, empty = list_live(keys[1 + i], l.res, l.win, now)
    ks[i] = k
    if not empty and redis.call('LLEN', keys[1 + i]) > k then live = true end
  end
  if not live or (hold and hold.born ~= tonumber(f.b)) then return end
  local out, changed, expires = {}, false, 0
  for i, l in ipairs(limits) do
    local lkey = keys[1 + i]
    local at = nil
    if hold then at = floordiv(hold.at, l.res) end
    local took, visited = list_take(lkey, ks[i], x, at)
    if took > 0 or (not hold and visited) then changed = true end
    local total = tonumber(f[l.t]) or 0
    if total >= 0 then total = total - took end
    out[#out + 1] = l.t
    out[#out + 1] = fmt(total)
    local t = list_newest(lkey)
    if t and t * l.res + l.win > now and t * l.res + l.win > expires then expires = t * l.res + l.win end
  end
  if expires <= now then
    local all = {hkey}
    for i = 1, #limits do all[#all + 1] = keys[1 + i] end
    redis.call('DEL', unpack(all))
    return
  end
  if changed then
    out[#out + 1] = 'l'
    out[#out + 1] = fmt(now)
  end
  redis.call('HSET', hkey, unpack(out))
  local ttl = ttl_ms(expires, now, p.min_ttl)
  redis.call('PEXPIRE', hkey, ttl)
  for i = 1, #limits do redis.call('PEXPIRE', keys[1 + i], ttl) end
end
