-- batch.lua: one FCALL deciding many calls, for TakeBatch. Only in the
-- function library (scripts.go), after common.lua and every algorithm's
-- file; a server without functions gets a pipeline of EVALSHA instead.
--
-- batch returns the function that decides many calls in one FCALL
-- (TakeBatch): fns maps an algorithm's tag (args[1]'s first field) to its
-- deciding function (entry's), and the tag and "p" to its peeking one. Its args come four per call: the tag, the
-- number of keys the call takes (from keys, in order), and the call's
-- args[1] and args[2]. It replies with an array of the calls' replies, in
-- order: one call's error (a redis.call refused, or a clock out of range)
-- is the reply in its place, and the calls after it go on, exactly as
-- when each is a call of its own. BK and BA are the scratch keys and args
-- each call reads, reused: a call reads keys[1 .. its count] only.
--
-- The calls that read the server's clock share one reading of TIME, made
-- by the first of them: a batch runs at one instant (no other command runs
-- between its calls), and TIME costs Redis about as much as a decision's
-- GET and SET together. BT holds it, emptied at each batch's start.
--
-- The calls whose first key other calls of the batch share (their key
-- count sent negative) share the batch's state cache, sc (common.lua,
-- state_get), made at the first of them: a hot key's state is read from
-- Redis once and written once, after the batch's last call.
local BK, BA, BT = {}, {}, {}

-- NK reads a call's key count without tonumber, whose strtod costs Redis
-- more than the rest of the loop. No call has more than 18 keys (a
-- sliding_window of 16 limits, tracking usage); tonumber reads any other.
-- A count sent negative marks a call whose first key other calls of the
-- batch share: it gets the batch's state cache (common.lua, state_get).
local NK = {['1'] = 1, ['2'] = 2, ['3'] = 3, ['4'] = 4, ['5'] = 5, ['6'] = 6, ['7'] = 7,
  ['8'] = 8, ['9'] = 9, ['10'] = 10, ['11'] = 11, ['12'] = 12, ['13'] = 13, ['14'] = 14,
  ['15'] = 15, ['16'] = 16, ['17'] = 17, ['18'] = 18, ['19'] = 19, ['20'] = 20, ['-1'] = -1,
  ['-2'] = -2, ['-3'] = -3, ['-4'] = -4, ['-5'] = -5, ['-6'] = -6, ['-7'] = -7, ['-8'] = -8,
  ['-9'] = -9, ['-10'] = -10, ['-11'] = -11, ['-12'] = -12, ['-13'] = -13, ['-14'] = -14,
  ['-15'] = -15, ['-16'] = -16, ['-17'] = -17, ['-18'] = -18, ['-19'] = -19, ['-20'] = -20}

local function batch(fns)
  return function(keys, args)
    local out, ki, sc = {}, 0, nil
    BT[1] = nil
    for ai = 1, #args, 4 do
      local nk, csc = NK[args[ai + 1]] or tonumber(args[ai + 1]), nil
      if nk < 0 then
        nk = -nk
        if not sc then sc = {v = {}, x = {}, d = {}} end
        csc = sc
      end
      for j = 1, nk do BK[j] = keys[ki + j] end
      ki = ki + nk
      BA[1], BA[2] = args[ai + 2], args[ai + 3]
      local ok, r = pcall(fns[args[ai]], BK, BA, BT, csc)
      if not ok and (type(r) ~= 'table' or not r.err) then
        r = redis.error_reply('ERR floodgate: ' .. tostring(r))
      end
      out[(ai + 3) / 4] = r
    end
    if sc then state_flush(sc) end
    return out
  end
end
