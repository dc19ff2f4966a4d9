-- gcra.lua: SPEC.md "gcra", rule 7. Go twin: internal/algo/gcra.go.
--
-- The theoretical arrival time is TAT + FRAC/count µs (0 ≤ FRAC < count),
-- and every quantity below is such a pair (whole µs, remainder in 1/count
-- µs); products that may pass 2^53 go through muldivmod.
--
-- KEYS[2]  the state: TAT, FRAC, t_last (µs) and the rate's count, in the
--          smallest form that holds them (see compact.lua):
--            "<t_last><n>"  the add at t_last found no live state and
--                           recorded n ≤ 999, so TAT + FRAC/count is
--                           t_last + n·T (an int-encoded value)
--            28 bytes       TAT, FRAC, t_last, count: 7 bytes each
--          and, as written before (still read): "<TAT> <FRAC> <t_last>
--          <count>". A state that names another count means nothing here
--          and is ignored (FRAC is in 1/count µs); the integer form is
--          read under the policy's own rate.
-- ARGV[8]  the rate's count, 1 to 2^53-1
-- ARGV[9]  the rate's period, µs (period ≥ count)
-- ARGV[10] burst, ≥ 1 (burst·period/count within 100 years)
-- Reply: see common.lua; binding is always 0.

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

local function lesseq(aq, ar, bq, br)
  return aq < bq or (aq == bq and ar <= br)
end

local function ceilpair(q, r)
  if r > 0 then return q + 1 end
  return q
end

local function decide(now, n, peek, cd, a, min_ttl)
  local count, period, burst = tonumber(a[1]), tonumber(a[2]), tonumber(a[3])
  local key = KEYS[2]
  local has, TAT, FRAC, tlast = false, 0, 0, 0
  local raw = redis.call('GET', key)
  if raw then
    local _, l, k = readint(raw)
    if l then
      local kq, kr = muldivmod(k, period, count)
      has, tlast = true, l
      TAT, FRAC = addpair(l, 0, kq, kr, count)
    elseif isbinary(raw, 4) then
      if unpack7(raw, 22) == count then
        has, TAT, FRAC, tlast = true, unpack7(raw, 1), unpack7(raw, 8), unpack7(raw, 15)
      end
    else
      local t, f, l2, c = string.match(raw, '^(%-?%d+) (%d+) (%-?%d+) (%d+)$')
      if t and tonumber(c) == count then has, TAT, FRAC, tlast = true, tonumber(t), tonumber(f), tonumber(l2) end
    end
  end
  if has and now < tlast then now = tlast end -- rule 1

  local bq, br = muldivmod(burst, period, count) -- burst·T
  local tq, tr = now, 0 -- max(tat, now)
  local live = has and (TAT > now or (TAT == now and FRAC > 0))
  local fresh = not live -- the add starts from now: TAT will be now + n·T
  if live then tq, tr = TAT, FRAC end
  local aq, ar = muldivmod(n, period, count) -- n·T
  local nq, nr = addpair(tq, tr, aq, ar, count)

  local allowed = lesseq(nq - now, nr, bq, br)
  local record = allowed or cd
  if record then tq, tr, live = nq, nr, true end

  local remaining
  if not live then
    remaining = burst
  elseif lesseq(bq, br, tq - now, tr) then
    remaining = 0
  else
    local xq, xr = bq - (tq - now), br - tr -- burst·T - (tat - now) > 0
    if xr < 0 then xq, xr = xq - 1, xr + count end
    remaining = muladddivmod(xq, count, xr, period)
  end
  local reset, expires = 0, 0
  if live then
    reset = ceilpair(tq - now, tr)
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
      retry = ceilpair(xq - now - bq, xr - br)
    end
  end
  if record and not peek then
    local v
    if fresh and n <= 999 then
      v = intstate(false, now, n)
    else
      v = pack(tq, tr, now, count)
    end
    redis.call('SET', key, v, 'PX', ttl_ms(expires, now, min_ttl))
  end
  return allowed, count, remaining, retry, reset, 0, expires
end

return run(decide)
