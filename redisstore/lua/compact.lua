-- compact.lua: the compact states of gcra and fixed_window, after
-- common.lua and before the algorithm's file.
--
-- Redis keeps a string value that is a decimal integer fitting 64 bits
-- inside the object header (encoding int: 16 B), one of up to 28 bytes in
-- a 48-byte allocation (embstr), and a longer one in 64 bytes or more. So
-- a state is, when it can be:
--   an integer "[-]<t_last µs><k, 3 digits>": at most 19 digits, so below
--     2^63 for any t_last up to MAXNOW and k up to 999;
--   else fixed fields of 7 bytes, each an integer below 2^53 big-endian,
--     whose first byte is below 32: never a digit or '-', so no integer
--     form and no text form of earlier versions starts with it.

-- intstate writes the integer form.
local function intstate(neg, tlast, k)
  local s = fmt(tlast) .. string.format('%03d', k)
  if neg then return '-' .. s end
  return s
end

-- readint reads the integer form: neg, t_last and k, or nil.
local function readint(raw)
  local neg, l, k = string.match(raw, '^(%-?)(%d+)(%d%d%d)$')
  if not l then return nil end
  return neg == '-', tonumber(l), tonumber(k)
end

-- pack writes three or four integers 0 ≤ x ≤ MAXS (z may be nil) as
-- fields of 7 bytes, most significant first, in one string.char: this
-- runs on every decision, and one call with no table and no
-- concatenation costs about half of a helper called per field.
local function pack(w, x, y, z)
  local w7 = w % 256
  w = (w - w7) / 256
  local w6 = w % 256
  w = (w - w6) / 256
  local w5 = w % 256
  w = (w - w5) / 256
  local w4 = w % 256
  w = (w - w4) / 256
  local w3 = w % 256
  w = (w - w3) / 256
  local w2 = w % 256
  w = (w - w2) / 256
  local x7 = x % 256
  x = (x - x7) / 256
  local x6 = x % 256
  x = (x - x6) / 256
  local x5 = x % 256
  x = (x - x5) / 256
  local x4 = x % 256
  x = (x - x4) / 256
  local x3 = x % 256
  x = (x - x3) / 256
  local x2 = x % 256
  x = (x - x2) / 256
  local y7 = y % 256
  y = (y - y7) / 256
  local y6 = y % 256
  y = (y - y6) / 256
  local y5 = y % 256
  y = (y - y5) / 256
  local y4 = y % 256
  y = (y - y4) / 256
  local y3 = y % 256
  y = (y - y3) / 256
  local y2 = y % 256
  y = (y - y2) / 256
  if not z then
    return string.char(w, w2, w3, w4, w5, w6, w7, x, x2, x3, x4, x5, x6, x7, y, y2, y3, y4, y5, y6, y7)
  end
  local z7 = z % 256
  z = (z - z7) / 256
  local z6 = z % 256
  z = (z - z6) / 256
  local z5 = z % 256
  z = (z - z5) / 256
  local z4 = z % 256
  z = (z - z4) / 256
  local z3 = z % 256
  z = (z - z3) / 256
  local z2 = z % 256
  z = (z - z2) / 256
  return string.char(w, w2, w3, w4, w5, w6, w7, x, x2, x3, x4, x5, x6, x7, y, y2, y3, y4, y5, y6, y7,
                     z, z2, z3, z4, z5, z6, z7)
end

-- unpack7 reads the 7-byte integer at position i of s.
local function unpack7(s, i)
  local a, b, c, d, e, f, g = string.byte(s, i, i + 6)
  return (((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f) * 256 + g
end

-- isbinary reports whether raw is the fixed-field form of m fields.
local function isbinary(raw, m)
  return #raw == 7 * m and string.byte(raw, 1) < 32
end
