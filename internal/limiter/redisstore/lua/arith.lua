-- Integer helpers shared by every script (prepended first by scripts.go).
--
-- Numbers are doubles. Validate's bounds keep every value below 2^53, where +, -, * and
-- comparisons of integers are exact and math.floor(a / b) is floor division for
-- 0 <= a <= 2^53, b >= 1 (the rounded quotient cannot reach the next integer).

-- fdiv is a / b and cdiv is ceil(a/b) (limiter's ceilDiv), for integers 0 <= a < 2^53, b > 0.
local function fdiv(a, b)
  return math.floor(a / b)
end
local function cdiv(a, b)
  local q = math.floor(a / b)
  if q * b ~= a then q = q + 1 end
  return q
end
