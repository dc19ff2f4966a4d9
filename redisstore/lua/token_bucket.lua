-- token_bucket.lua: SPEC.md "token_bucket", rule 6. Go twin:
-- internal/algo/tokenbucket.go.
--
-- The Go twin keeps U = tokens × window_µs as one integer; here U is the
-- pair (Q, R) with U = Q·window + R and 0 ≤ R < window, so that no stored
-- number passes 2^53: Q is a whole token count (negative with count_denied,
-- never below -(limit - burst)), R the fraction of a token in 1/window.
-- U ≥ n·window exactly when Q ≥ n.
--
-- KEYS[2]  the state, a string "<created µs> <t_last µs> <Q> <R> <window µs>";
--          a state written under another window is ignored
-- ARGV[8]  limit, ≥ 1
-- ARGV[9]  window, µs
-- ARGV[10] burst, 1 to limit
-- Reply: see common.lua; binding is always 0.

local function decide(now, n, peek, cd, a, min_ttl)
  local limit, w, burst = tonumber(a[1]), tonumber(a[2]), tonumber(a[3])
  local rate = limit - burst -- U gained per µs
  local key = KEYS[2]
  local has, created_s, tlast, Q, R = false, 0, 0, 0, 0
  local raw = redis.call('GET', key)
  if raw then
    local c, l, q, r, sw = string.match(raw, '^(%-?%d+) (%-?%d+) (%-?%d+) (%d+) (%d+)$')
    if c and tonumber(sw) == w then
      has, created_s, tlast, Q, R = true, tonumber(c), tonumber(l), tonumber(q), tonumber(r)
    end
  end
  if has and now < tlast then now = tlast end -- rule 1

  local created, q, r = now, burst, 0 -- a fresh bucket: full
  local live = has and now < created_s + w
  if live then
    created = created_s
    -- refill (now - t_last)·rate, capped at burst tokens
    local dq, dr = muldivmod(now - tlast, rate, w)
    q, r = Q + dq, R + dr
    if r >= w then q, r = q + 1, r - w end
    if q > burst or (q == burst and r > 0) then q, r = burst, 0 end
  end

  local allowed = n <= burst and q >= n
  local record = allowed or cd
  local aq, ar = q, r
  if record then
    if n > q + rate then
      aq, ar = -rate, 0 -- the clamp: no decision can tell lower U apart
    else
      aq = q - n
    end
  end
  local remaining = aq
  if remaining < 0 then remaining = 0 end
  local reset, expires = 0, 0
  if live or record then
    reset = created + w - now
    expires = created + w
  end
  local retry = 0
  if not allowed then
    if n > burst then
      retry = -1
    elseif rate == 0 then
      retry = reset
    else
      -- ⌈(n·w - U)/rate⌉ with n·w - U = (n - aq - 1)·w + (w - ar) > 0
      local wq, wr = muladddivmod(n - aq - 1, w, w - ar, rate)
      if wr > 0 then wq = wq + 1 end
      retry = wq
      if reset < retry then retry = reset end
    end
  end
  if record and not peek then
    redis.call('SET', key, fmt(created) .. ' ' .. fmt(now) .. ' ' .. fmt(aq) .. ' ' .. fmt(ar) .. ' ' .. fmt(w),
      'PX', ttl_ms(expires, now, min_ttl))
  end
  return allowed, limit, remaining, retry, reset, 0, expires
end

return run(decide)
