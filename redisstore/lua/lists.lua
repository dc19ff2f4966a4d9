-- lists.lua: the bucket and entry lists of sliding_window and
-- sliding_log, after common.lua and before the algorithm's file (the
-- other algorithms' scripts do without, which spares them defining these
-- functions on every call). Go twin: internal/algo/log.go.

-- Lists of (T, N) entries, oldest at the head, as "T N" strings: the
-- buckets of one sliding_window limit (T = bucket index) or the entries of
-- a sliding_log (T = µs). Their running sum lives in the state hash; a sum
-- that would pass MAXS is stored as -1 and recounted from the list. Go twin:
-- internal/algo/log.go.
local CHUNK = 32

local function list_item(s)
  local t, n = string.match(s, '^(%-?%d+) (%d+)$')
  return tonumber(t), tonumber(n)
end

-- list_live returns how many entries at the head have expired at now (an
-- entry expires at T·scale + span), their sum, and whether the list holds
-- nothing at all, reading in chunks.
local function list_live(key, scale, span, now)
  local k, gone, i = 0, 0, 0
  while true do
    local items = redis.call('LRANGE', key, i, i + CHUNK - 1)
    if i == 0 and #items == 0 then return 0, 0, true end
    for _, s in ipairs(items) do
      local t, n = list_item(s)
      if t * scale + span > now then return k, gone, false end
      k = k + 1
      gone = satadd(gone, n)
    end
    if #items < CHUNK then return k, gone, false end
    i = i + CHUNK
  end
end

-- list_sum returns the saturated sum of the entries after the first k.
local function list_sum(key, k)
  local s = 0
  for _, item in ipairs(redis.call('LRANGE', key, k, -1)) do
    local _, n = list_item(item)
    s = satadd(s, n)
  end
  return s
end

-- list_count returns the expired entries at the head, their sum, the
-- saturated live count, and the running sum to keep using: the stored one
-- (-1: recount from the list), or 0 when the list is gone (evicted or
-- expired on its own), whatever the hash still says.
local function list_count(key, total, scale, span, now)
  local k, gone, empty = list_live(key, scale, span, now)
  if empty then return 0, 0, 0, 0 end
  if total < 0 then return k, gone, list_sum(key, k), total end
  local c = total - gone
  if c > MAXS then c = MAXS end
  return k, gone, c, total
end

-- list_wait is Log.Wait: walking from the newest entry back to the first
-- live one (index first), with the pending cost (a recording call's add,
-- not stored yet, expiring at pending_exp) counted first, it returns the
-- expiry of the newest entry that must go for the rest to sum to at most
-- budget, or now when nothing must go.
local function list_wait(key, first, scale, span, budget, pending, pending_exp, now)
  local s = pending
  if s > budget then return pending_exp end
  local len = redis.call('LLEN', key)
  local hi = len - 1
  while hi >= first do
    local lo = hi - CHUNK + 1
    if lo < first then lo = first end
    local items = redis.call('LRANGE', key, lo, hi)
    for i = #items, 1, -1 do
      local t, n = list_item(items[i])
      s = satadd(s, n)
      if s > budget then return t * scale + span end
    end
    hi = lo - 1
  end
  return now
end

-- list_newest returns the newest entry's T, or nil.
local function list_newest(key)
  local s = redis.call('LINDEX', key, -1)
  if not s then return nil end
  local t = list_item(s)
  return t
end

-- list_record drops the k expired entries (summing gone), adds n at t
-- (merging with a newest entry of the same T) and returns the new running
-- sum of the list, or -1 when it would pass MAXS (recount from the list).
local function list_record(key, k, gone, total, t, n)
  if k > 0 then redis.call('LTRIM', key, k, -1) end
  local delta = n
  local last = redis.call('LINDEX', key, -1)
  local lt, ln
  if last then lt, ln = list_item(last) end
  if last and lt == t then
    local merged = satadd(ln, n)
    delta = merged - ln
    redis.call('LSET', key, -1, fmt(t) .. ' ' .. fmt(merged))
  else
    redis.call('RPUSH', key, fmt(t) .. ' ' .. fmt(n))
  end
  if total < 0 then
    local sum = list_sum(key, 0)
    if sum >= MAXS then return -1 end
    return sum
  end
  local base = total - gone
  if delta > MAXS - base then return -1 end
  return base + delta
end
