-- fixed_window.lua: SPEC.md "fixed_window". Go twin:
-- internal/algo/fixedwindow.go.
--
-- KEYS[2]  the state, a string "<start µs> <count> <t_last µs>"
-- ARGV[8]  max, an integer ≥ 0
-- ARGV[9]  window, µs
-- ARGV[10] align: "first" or "epoch"
-- Reply: see common.lua; binding is always 0.

local function decide(now, n, peek, cd, a, min_ttl)
  local max, w, first = tonumber(a[1]), tonumber(a[2]), a[3] == 'first'
  local key = KEYS[2]
  local has, start, count, tlast = false, 0, 0, 0
  local raw = redis.call('GET', key)
  if raw then
    local s, c, l = string.match(raw, '^(%-?%d+) (%d+) (%-?%d+)$')
    if s then has, start, count, tlast = true, tonumber(s), tonumber(c), tonumber(l) end
  end
  if has and now < tlast then now = tlast end -- rule 1: the clock went back

  local live = has and now < start + w
  if not live then
    count = 0
    if first then start = now else start = now - now % w end
  end
  local allowed = n <= max - count
  local record = allowed or cd
  local after = count
  if record then after = satadd(count, n) end
  local remaining = max - after
  if remaining < 0 then remaining = 0 end
  local reset, expires = 0, 0
  if live or record then
    reset = start + w - now
    expires = start + w
  end
  local retry = 0
  if not allowed then
    if n > max then retry = -1 else retry = reset end
  end
  if record and not peek then
    redis.call('SET', key, fmt(start) .. ' ' .. fmt(after) .. ' ' .. fmt(now), 'PX', ttl_ms(expires, now, min_ttl))
  end
  return allowed, max, remaining, retry, reset, 0, expires
end

return run(decide)
