-- Integer helpers shared by every script (prepended first by scripts.go).
--
-- Numbers are doubles. Validate's bounds keep every value below 2^53 (the largest are cap*W,
-- L*W and M*L, each <= 1e8 * 8.64e7 = 8.64e15, and instants <= 2^52 + 2*W), where +, -, * and
-- comparisons of integers are exact and math.floor(a / b) is floor division for
-- 0 <= a <= 2^53, b >= 1 (the rounded quotient cannot reach the next integer). redis.call
-- formats numbers with "%.17g", exact for these integers; string states use "%d".

-- Locals, not globals, for what the scripts call per decision: a global is a table lookup.
local floor, min, max, tonumber = math.floor, math.min, math.max, tonumber

-- cdiv is ceil(a/b) (limiter's ceilDiv), for integers 0 <= a < 2^53, b > 0 (floor(a / b) is
-- floor division: see above).
local function cdiv(a, b)
  local q = floor(a / b)
  if q * b ~= a then q = q + 1 end
  return q
end

-- The buckets' state, two integers 0 <= a < 2^53 (tokens or level, scaled) and 0 <= b < 2^53
-- (an instant, ms), in the fewest bytes that keep MEMORY USAGE small: while b < 2^43 (until the
-- year 2248), 96 bits as three little-endian 32-bit words (a's low 32 bits; a's high 21 bits
-- and b's low 11; b's high 32): 12 bytes, the most a value can have and still fit Redis's
-- 32-byte allocation; else 14 bytes, '<I7I7'. Every step is exact integer arithmetic on
-- doubles below 2^53.
--
-- A TokenBucket in debt after a late charge has a < 0 (down to -2^53 + 1): '<I7I7B' of -a, b
-- and a flag byte, 15 bytes, a length neither form above has.
local function packBucket(a, b)
  if a < 0 then return struct.pack('<I7I7B', -a, b, 1) end
  if b >= 8796093022208 then return struct.pack('<I7I7', a, b) end -- 2^43
  local alo = a % 4294967296 -- 2^32
  local blo = b % 2048 -- 2^11
  return struct.pack('<I4I4I4', alo, (a - alo) / 4294967296 + blo * 2097152, (b - blo) / 2048)
end
local function unpackBucket(raw)
  if #raw == 15 then
    local a, b = struct.unpack('<I7I7B', raw)
    return -a, b
  end
  if #raw == 14 then
    local a, b = struct.unpack('<I7I7', raw)
    return a, b
  end
  local alo, mid, bhi = struct.unpack('<I4I4I4', raw)
  local ahi = mid % 2097152 -- 2^21
  return ahi * 4294967296 + alo, bhi * 2048 + (mid - ahi) / 2097152
end
