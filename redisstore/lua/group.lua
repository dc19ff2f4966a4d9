-- group.lua: SPEC.md "Atomic groups", "Reserve, settle, refund", "Partial
-- grants" and "Calendar windows": every operation beyond a plain add or
-- peek, on 1 to 16 members, in one call on one slot. Go twin:
-- internal/algo/budget.go and refund.go. It comes after every algorithm's
-- file, and decides each member through that algorithm's decide (which
-- reads and writes the member's own keys) and give.
--
-- keys     each member's keys in member order: its state keys, then its
--          usage hash when its policy tracks usage
-- args[1]  "<op> <n> <now>": op one of add, peek, atmost, peekatmost,
--          reserve, settle, refund; n the cost (for a settle, the units to
--          give back); now in µs, or - for the server's TIME
-- args[2i], args[2i+1]  member i's parameters (as common.lua's args[1])
--          and, for a calendar window or a settle, "<b0> <b1> <b2> <b3>
--          <at> <born> <tq> <tr>": the calendar bounds (0 0 0 0 for other
--          policies) and, for a settle, the member's hold (else empty)
-- Reply: {allowed 0/1, remaining, retry_after µs (-1: never), reset_after
-- µs, member (0-based), the member's binding limit, granted}, then for a
-- reserve each member's at, born, tq and tr.
-- An error reply "ERR floodgate: calendar …" when a calendar member's
-- bounds hold no window for now (after rule 1): nothing is decided.

local ALGOS = {
  fw = {fixed_window_parse, fixed_window_decide, fixed_window_give},
  gc = {gcra_parse, gcra_decide, gcra_give},
  tb = {token_bucket_parse, token_bucket_decide, token_bucket_give},
  ar = {ar1_parse, ar1_decide, ar1_give},
  sw = {sliding_window_parse, sliding_window_decide, sliding_window_give},
  sl = {sliding_log_parse, sliding_log_decide, sliding_log_give},
}

-- nocd returns p's parameters recording no denied request (cached in p).
local function nocd(p)
  local q = p.nocd
  if q then return q end
  q = {}
  for k, v in pairs(p) do q[k] = v end
  q.cd = false
  p.nocd = q
  return q
end

-- dec decides member m (with parameters pp, m.p when nil): its algorithm's
-- decide, as a table {allowed, remaining, retry, reset, binding, expires}.
local function dec(m, now, n, peek, pp)
  if m.cal then CAL = m.cal end
  return {m.alg[2](m.keys, pp or m.p, now, n, peek)}
end

-- read_member: remaining, limit and reset_after of m's state as it is,
-- recording nothing (readMember).
local function read_member(m, now)
  local d = dec(m, now, MAXS, true, nocd(m.p))
  d[1], d[3] = true, 0
  return d
end

-- wait_on: the retry_after a denied add n recording nothing would report
-- on m's state, 0 when it would pass (waitOn).
local function wait_on(m, now, n)
  local d = dec(m, now, n, true, nocd(m.p))
  if d[1] then return 0 end
  return d[3]
end

-- group_add decides add n (peek: the decision add n would get) on the
-- members as one group (algo.Add), returning allowed, the decisions, the
-- waits and the verdicts, and filling holds[i] from each recording add.
local function group_add(ms, now, n, peek, holds)
  if #ms == 1 then
    -- A group of one decides exactly as its member alone: once.
    local d = dec(ms[1], now, n, peek)
    if holds then holds[1] = {HB.at, HB.born, HB.tq, HB.tr} end
    return d[1], d[2], d[3], d[4], 1, d[5], {d}
  end
  local verdicts, pd, allowed = {}, {}, true
  for i, m in ipairs(ms) do
    pd[i] = dec(m, now, n, true)
    verdicts[i] = pd[i][1]
    if not pd[i][1] then allowed = false end
  end
  local ds, waits = {}, {}
  for i, m in ipairs(ms) do
    local d
    waits[i] = 0
    if allowed then
      if peek then d = pd[i] else d = dec(m, now, n, false) end
    elseif m.p.cd then
      if peek then
        d = pd[i]
        waits[i] = d[3]
        if verdicts[i] then
          -- The wait on the state after recording: record, look, put
          -- the keys back as they were.
          local saved = {}
          for j, k in ipairs(m.keys) do
            saved[j] = {redis.call('DUMP', k), redis.call('PTTL', k)}
          end
          dec(m, now, n, false)
          waits[i] = wait_on(m, now, n)
          for j, k in ipairs(m.keys) do
            local v, ttl = saved[j][1], saved[j][2]
            if v then
              if ttl < 0 then ttl = 0 end
              redis.call('RESTORE', k, ttl, v, 'REPLACE')
            else
              redis.call('DEL', k)
            end
          end
        end
      else
        d = dec(m, now, n, false)
        waits[i] = d[3]
        if verdicts[i] then waits[i] = wait_on(m, now, n) end
      end
    elseif not verdicts[i] then
      d = pd[i]
      waits[i] = d[3]
    else
      d = read_member(m, now)
    end
    ds[i] = d
    if holds then holds[i] = {HB.at, HB.born, HB.tq, HB.tr} end
  end
  -- combine: the binding member is the least remaining among those that
  -- deny (all when allowed), the first on ties.
  local member, remaining, retry, reset = 0, 0, 0, 0
  for i, d in ipairs(ds) do
    if i == 1 or d[2] < remaining then remaining = d[2] end
    if (allowed or not verdicts[i]) and (member == 0 or d[2] < ds[member][2]) then member = i end
    if d[4] > reset then reset = d[4] end
    if not allowed then
      local w = waits[i]
      if retry < 0 or w < 0 then retry = -1 elseif w > retry then retry = w end
    end
  end
  return allowed, remaining, retry, reset, member, ds[member][5], ds
end

-- available returns the largest g in [0, limit] that add g would admit on
-- m now (algo's available): from its remaining, settled by peeks.
local function available(m, now, limit)
  local function pass(g) return dec(m, now, g, true)[1] end
  local g = read_member(m, now)[2]
  if limit < g then g = limit end
  if g >= 1 and pass(g) then
    while g < limit and pass(g + 1) do g = g + 1 end
    return g
  end
  if g >= 2 and pass(g - 1) then return g - 1 end
  local lo, hi = 0, g
  while hi - lo > 1 do
    local mid = lo + math.floor((hi - lo) / 2)
    if pass(mid) then lo = mid else hi = mid end
  end
  return lo
end

-- group_entry is the function of every operation on a group.
local function group_entry(keys, args)
  local head = fields(args[1])
  local op, n = head[1], tonumber(head[2])
  local now
  if head[3] == '-' then
    local t = redis.call('TIME')
    now = t[1] * 1000000 + t[2]
  else
    now = tonumber(head[3])
  end
  if now < 0 or now > MAXNOW then
    return redis.error_reply('ERR floodgate: clock reads ' .. fmt(now) .. ' µs, outside 1970 to 2155')
  end
  local ms, off = {}, 0
  for i = 2, #args, 2 do
    local f1 = string.match(args[i], '^(%S+)')
    local alg = ALGOS[f1]
    local p = P[args[i]]
    if not p then p = params(args[i], alg[1]) end
    local x = {}
    if #args[i + 1] > 0 then x = fields(args[i + 1]) end
    local m = {p = p, alg = alg, keys = {}}
    for j = 1, p.nkeys do m.keys[j] = keys[off + j] end
    off = off + p.nkeys
    if p.track then
      m.ukey = keys[off + 1]
      off = off + 1
    end
    if p.cal then
      m.cal = {tonumber(x[1]), tonumber(x[2]), tonumber(x[3]), tonumber(x[4])}
      -- The bounds must hold now after rule 1, before anything is decided.
      local raw = redis.call('GET', m.keys[1])
      local t = now
      if raw and #raw == 32 then
        local _, _, tlast = struct.unpack('<dddd', raw)
        if t < tlast then t = tlast end
      end
      CAL = m.cal
      if not cal_window(t) then
        return redis.error_reply('ERR floodgate: calendar bounds of member ' .. fmt(#ms) .. ' do not cover the store clock')
      end
    end
    if op == 'settle' then
      m.hold = {at = tonumber(x[5]), born = tonumber(x[6]), tq = tonumber(x[7]), tr = tonumber(x[8])}
    end
    ms[#ms + 1] = m
  end

  local allowed, remaining, retry, reset, member, binding, ds
  local granted, holds, cost = 0, nil, n
  if op == 'settle' or op == 'refund' then
    for _, m in ipairs(ms) do
      local h = nil
      if op == 'settle' then h = m.hold end
      if m.cal then CAL = m.cal end
      m.alg[3](m.keys, m.p, now, n, h)
    end
    allowed, remaining, retry, reset, member, binding = group_add(ms, now, 1, true, nil)
    if allowed then granted = 1 end -- peek 1's
  else
    local peek = op == 'peek' or op == 'peekatmost'
    if op == 'atmost' or op == 'peekatmost' then
      local g = n
      for _, m in ipairs(ms) do
        local a = available(m, now, g)
        if a < g then g = a end
      end
      if g == 0 then cost = 1 else cost = g end
    end
    if op == 'reserve' then holds = {} end
    allowed, remaining, retry, reset, member, binding, ds = group_add(ms, now, cost, peek, holds)
    if allowed then granted = cost end
    if not peek then
      for i, m in ipairs(ms) do
        if m.ukey then
          if m.p.sres then
            track_series(m.ukey, now, cost, allowed, ds[i][6], m.p)
          else
            track(m.ukey, now, cost, allowed, ds[i][6], m.p)
          end
        end
      end
    end
  end
  local a = 0
  if allowed then a = 1 end
  local out = {a, remaining, retry, reset, member - 1, binding, granted}
  if holds and allowed then
    for i = 1, #ms do
      local h = holds[i]
      for j = 1, 4 do out[#out + 1] = h[j] end
    end
  end
  return out
end
