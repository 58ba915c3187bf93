-- LeakyBucket: limiter.LeakyBucketState.TakeMeter, or TakeQueue when ARGV[8] is 'q'.
-- KEYS[1]: "<level> <instant>", the level in scaled units (a request of cost c adds c*W, L leak
-- per ms) and the instant (ms) it was computed at. An absent key is an empty bucket (Level 0,
-- Last 0).
local raw, st = load()
local level, last = 0, 0
if raw then level, last = st[1], st[2] end
local full = cap * W -- <= 8.64e15

-- leak
level = math.min(level, full) -- capacity was lowered
if now > last then -- else the clock went back: no leak
  local dt = now - last
  if dt >= cdiv(level, L) then
    level = 0 -- never forms dt*L for a large dt
  else
    level = level - dt * L -- dt*L < level
  end
  last = now
end

local allowed, retry, reason, delay, remaining = 0, 0, 0, 0, 0
if ARGV[8] == 'q' then
  -- Queue
  local d = cdiv(level, L)
  if c > cap then
    retry, reason = -1, 2
  elseif level <= full - c * W and d <= M then
    level = level + c * W
    allowed, delay = 1, d
  else
    reason = 1
    if level <= full - c * W then reason = 3 end
    retry = cdiv(level - math.min(full - c * W, M * L), L) -- M*L <= 8.64e15
  end
  local t1 = math.min(full - W, M * L)
  if level <= t1 then remaining = fdiv(t1 - level, W) + 1 end
else
  -- Meter
  if c > cap then
    retry, reason = -1, 2
  elseif level <= full - c * W then -- level + c*W <= full, kept below 2^53
    level = level + c * W
    allowed = 1
  else
    retry, reason = cdiv(level - (full - c * W), L), 1
  end
  remaining = fdiv(full - level, W)
end
local reset = cdiv(level, L)
save(raw, reset, string.format('%d %d', level, last))
return {allowed, remaining, reset, retry, delay, reason}
