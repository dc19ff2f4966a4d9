-- sliding_log.lua: SPEC.md "sliding_log", rule 9. Go twin:
-- internal/algo/slidinglog.go (and log.go for the list).
--
-- A list of entries "<µs> <units>", oldest first; entries of one µs share
-- one element. An entry counts while t > now - interval.
--
-- keys[1]  the state hash: l = t_last µs, t1 = the list's running sum (-1:
--          recount from the list)
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
  local h = redis.call('HMGET', hkey, 'l', 't1')
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
    redis.call('HSET', hkey, 'l', fmt(now), 't1', fmt(total))
    local ttl = ttl_ms(expires, now, p.min_ttl)
    redis.call('PEXPIRE', hkey, ttl)
    redis.call('PEXPIRE', lkey, ttl)
  end
  return allowed, remaining, retry, reset, 0, expires
end
