-- SlidingWindowCounter: limiter.SlidingWindowCounterState.Take.
-- KEYS[1]: "<window index w> <units in window w-1> <units in window w>".
local raw, st = load()
local win, p, n = 0, 0, 0
if raw then win, p, n = st[1], st[2], st[3] end

local w = fdiv(now, W)
if w == win then
  -- same window
elseif w == win + 1 then
  win, p, n = w, n, 0
elseif w > win then
  win, p, n = w, 0, 0
else
  now = win * W -- clock went back
end
local e = now - win * W -- 0 <= e < W
-- (now-W, now] holds the last rest ticks of the previous window
local rest = W - 1 - e  -- 0 <= rest < W

local allowed, retry, reason = 0, 0, 0
if c > L then
  retry, reason = -1, 2
elseif n + c <= L and p * rest <= (L - n - c) * W then -- both sides <= L*W <= 8.64e15
  n = n + c
  allowed = 1
elseif n + c <= L then
  -- later in this window (p > 0 here), at e' = W - 1 - k
  local k = fdiv((L - n - c) * W, p) -- numerator <= L*W
  retry, reason = W - 1 - k - e, 1
else
  -- in the next window, where p' = n and n' = 0, at e2
  local e2 = 0
  if n > 0 then e2 = math.max(0, W - 1 - fdiv((L - c) * W, n)) end -- numerator <= L*W
  retry, reason = W - e + e2, 1
end
local reset = 0
if n > 0 then
  reset = rest + W
elseif p > 0 then
  reset = rest
end
save(raw, reset, string.format('%d %d %d', win, p, n))
-- p*rest <= L*W
return {allowed, math.max(0, L - n - cdiv(p * rest, W)), reset, retry, 0, reason}
