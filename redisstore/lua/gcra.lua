-- gcra.lua: SPEC.md "gcra", rule 7. Go twin: internal/algo/gcra.go.
--
-- The theoretical arrival time is TAT + FRAC/count µs (0 ≤ FRAC < count),
-- and every quantity below is such a pair (whole µs, remainder in 1/count
-- µs); products that may pass 2^53 go through muldivmod.
--
-- keys[1]  the state: TAT, FRAC, t_last (µs), the rate's count and born
--          (µs) as five signed 7-byte big-endian integers (struct
--          '>i7i7i7i7i7', 35 bytes: one 48-byte allocation in Redis). A state that names
--          another count means nothing here and is ignored (FRAC is in
--          1/count µs), as memstore starts afresh when the count changes.
-- args[1]  "gc <common> <count> <period µs> <burst>": the rate's count
--          (1 to 2^53-1), its period (≥ count), the burst (≥ 1,
--          burst·period/count within 100 years)
-- Reply: see common.lua; binding is always 0.

local function gcra_parse(f, p)
  p.nkeys = 1
  p.count, p.period, p.burst = tonumber(f[6]), tonumber(f[7]), tonumber(f[8])
  p.bq, p.br = muldivmod(p.burst, p.period, p.count) -- burst·T
  p.tq, p.tr = muldivmod(1, p.period, p.count) -- T, the cost of n = 1
end

-- addpair adds (aq, ar) and (bq, br) with remainders in [0, c); a sum of
-- MAXS µs or more saturates to (MAXS, 0). ar + br may pass 2^53, so the
-- carry is decided by comparing ar with c - br.
local function addpair(aq, ar, bq, br, c)
  local q, r = aq + bq, 0
  if ar >= c - br then
    q, r = q + 1, ar - (c - br)
  else
    r = ar + br
  end
  if aq >= MAXS or bq >= MAXS or q >= MAXS then return MAXS, 0 end
  return q, r
end

local function gcra_decide(keys, p, now, n, peek, sc)
  local count, period, burst = p.count, p.period, p.burst
  local key = keys[1]
  local has, TAT, FRAC, tlast, born = false, 0, 0, 0, 0
  local raw
  if sc then raw = state_get(sc, key) else raw = redis.call('GET', key) end
  if raw and #raw == 35 then
    local q, r, l, c, b = struct.unpack('>i7i7i7i7i7', raw)
    if c == count then has, TAT, FRAC, tlast, born = true, q, r, l, b end
  end
  if has and now < tlast then now = tlast end -- rule 1

  local bq, br = p.bq, p.br -- burst·T
  local tq, tr = now, 0 -- max(tat, now)
  local live = has and (TAT > now or (TAT == now and FRAC > 0))
  if live then tq, tr = TAT, FRAC else born = 0 end
  local was = live
  local aq, ar = p.tq, p.tr -- n·T
  if n ~= 1 then aq, ar = muldivmod(n, period, count) end
  local nq, nr = addpair(tq, tr, aq, ar, count)

  local allowed = nq - now < bq or (nq - now == bq and nr <= br)
  local record = allowed or p.cd
  if record then tq, tr, live = nq, nr, true end

  local remaining
  if not live then
    remaining = burst
  elseif bq < tq - now or (bq == tq - now and br <= tr) then
    remaining = 0
  else
    local xq, xr = bq - (tq - now), br - tr -- burst·T - (tat - now) > 0
    if xr < 0 then xq, xr = xq - 1, xr + count end
    remaining = muladddivmod(xq, count, xr, period)
  end
  local reset, expires = 0, 0
  if live then
    reset = tq - now
    if tr > 0 then reset = reset + 1 end
    expires = now + reset
  end
  local retry = 0
  if not allowed then
    if n > burst then
      retry = -1
    else
      local xq, xr = now, 0
      if live then xq, xr = tq, tr end
      xq, xr = addpair(xq, xr, aq, ar, count)
      retry = xq - now - bq
      if xr - br > 0 then retry = retry + 1 end
    end
  end
  if record and not was then born = now end
  HB.at, HB.born, HB.tq, HB.tr = now, born, tq, tr
  if record and not peek then
    local v, px = struct.pack('>i7i7i7i7i7', tq, tr, now, count, born), ttl_ms(expires, now, p.min_ttl)
    if sc then state_set(sc, key, v, px) else redis.call('SET', key, v, 'PX', px) end
  end
  return allowed, remaining, retry, reset, 0, expires
end

-- gcra_give: tat = max(now, tat - g), g = x·T, or for a settle
-- min(x·T, max(0, tat_r - now)): only what of the reservation is still
-- ahead of now comes back. A tat brought to now leaves no state.
local function gcra_give(keys, p, now, x, hold)
  local count, period = p.count, p.period
  local key = keys[1]
  local raw = redis.call('GET', key)
  if not raw or #raw ~= 35 then return end
  local TAT, FRAC, tlast, c, born = struct.unpack('>i7i7i7i7i7', raw)
  if c ~= count then return end
  if now < tlast then now = tlast end
  if not (TAT > now or (TAT == now and FRAC > 0)) then return end
  if hold and hold.born ~= born then return end
  local gq, gr = muldivmod(x, period, count)
  if hold then
    if hold.tq < now or (hold.tq == now and hold.tr == 0) then return end
    local dq, dr = hold.tq - now, hold.tr
    if dq < gq or (dq == gq and dr <= gr) then gq, gr = dq, dr end
  end
  local tq, tr = TAT - now, FRAC
  if tq < gq or (tq == gq and tr <= gr) then
    redis.call('DEL', key)
    return
  end
  tq, tr = TAT - gq, FRAC - gr
  if tr < 0 then tq, tr = tq - 1, tr + count end
  local reset = tq - now
  if tr > 0 then reset = reset + 1 end
  redis.call('SET', key, struct.pack('>i7i7i7i7i7', tq, tr, now, count, born), 'PX', ttl_ms(now + reset, now, p.min_ttl))
end
