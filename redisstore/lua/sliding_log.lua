-- sliding_log.lua: SPEC.md "sliding_log", rule 9. Go twin:
-- internal/algo/slidinglog.go (and log.go for the list).
--
-- A list of entries "<µs> <units>", oldest first; entries of one µs share
-- one element. An entry counts while t > now - interval.
--
-- keys[1]  the state hash: l = t_last µs, t1 = the list's running sum (-1:
--          recount from the list), b = born µs
-- keys[2]  the list
-- args[1]  "sl <common> <max> <interval µs> <min_interval µs>": max ≥ 1,
--          min_interval 0 for none
-- Reply: see common.lua; binding is always 0.

local function sliding_log_parse(f, p)
  p.nkeys = 2
  p.max, p.interval, p.gap = tonumber(f[6]), tonumber(f[7]), tonumber(f[8])
end

local function sliding_log_decide(keys, p, now, n, peek)
  local max, interval, gap, cd = p.max, p.interval, p.gap, p.cd
  local hkey, lkey = keys[1], keys[2]
  local h = redis.call('HMGET', hkey, 'l', 't1', 'b')
  local has = h[1] ~= false
  if has and now < tonumber(h[1]) then now = tonumber(h[1]) end -- rule 1

  local k, gone, count, total = 0, 0, 0, 0
  local newest = nil
  if has then
    k, gone, count, total = list_count(lkey, tonumber(h[2]) or 0, 1, interval, now)
    local t = list_newest(lkey)
    if t and t + interval > now then newest = t end
  end

  local allowed = n <= max - count and not (gap > 0 and newest and now - newest < gap)
  local record = allowed or cd
  local born = 0
  if count > 0 then born = tonumber(h[3]) or 0 elseif record then born = now end
  HB.at, HB.born, HB.tq, HB.tr = now, born, 0, 0
  local after = count
  if record then
    after = satadd(count, n)
    newest = now
  end
  local remaining = max - after
  if remaining < 0 then remaining = 0 end
  local reset, expires = 0, 0
  if newest then
    reset = newest + interval - now
    expires = newest + interval
  end
  local retry = 0
  if not allowed then
    if n > max then
      retry = -1
    else
      local wait = 0
      if n > max - after then
        local pending = 0
        if record then pending = n end
        if has then
          wait = list_wait(lkey, k, 1, interval, max - n, pending, now + interval, now) - now
        elseif pending > max - n then
          wait = interval
        end
      end
      if gap > 0 and newest and newest + gap - now > wait then wait = newest + gap - now end
      retry = wait
    end
  end
  if record and not peek then
    if not has then redis.call('DEL', lkey) end
    total = list_record(lkey, k, gone, total, now, n)
    redis.call('HSET', hkey, 'l', fmt(now), 't1', fmt(total), 'b', fmt(born))
    local ttl = ttl_ms(expires, now, p.min_ttl)
    redis.call('PEXPIRE', hkey, ttl)
    redis.call('PEXPIRE', lkey, ttl)
  end
  return allowed, remaining, retry, reset, 0, expires
end

-- sliding_log_give: a settle takes the units stamped at the reservation's
-- µs, a refund the newest units back; the keys then expire with the
-- newest entry left, or go.
local function sliding_log_give(keys, p, now, x, hold)
  local interval = p.interval
  local hkey, lkey = keys[1], keys[2]
  local h = redis.call('HMGET', hkey, 'l', 't1', 'b')
  if not h[1] then return end
  if now < tonumber(h[1]) then now = tonumber(h[1]) end
  local k, _, empty = list_live(lkey, 1, interval, now)
  if empty or redis.call('LLEN', lkey) <= k then return end
  if hold and hold.born ~= tonumber(h[3]) then return end
  local at = nil
  if hold then at = hold.at end
  local took, visited = list_take(lkey, k, x, at)
  local total = tonumber(h[2]) or 0
  if total >= 0 then total = total - took end
  local t = list_newest(lkey)
  if not t or t + interval <= now then
    redis.call('DEL', hkey, lkey)
    return
  end
  if took > 0 or (not hold and visited) then
    redis.call('HSET', hkey, 'l', fmt(now), 't1', fmt(total))
  else
    redis.call('HSET', hkey, 't1', fmt(total))
  end
  local ttl = ttl_ms(t + interval, now, p.min_ttl)
  redis.call('PEXPIRE', hkey, ttl)
  redis.call('PEXPIRE', lkey, ttl)
end
