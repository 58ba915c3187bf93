-- TokenBucket: limiter.TokenBucketState.Take. KEYS[1] hash: t = tokens in scaled units (one
-- token = W units, L units per ms), l = the instant t was computed at. An absent key is a full
-- bucket (Started = false).
local st = redis.call('HMGET', KEYS[1], 't', 'l')
local existed = st[1] ~= false
local full = cap * W -- <= MaxLimit * MaxWindow = 8.64e15
local tokens, last
if existed then
  tokens, last = tonumber(st[1]), tonumber(st[2])
else
  tokens, last = full, now
end
tokens = math.min(tokens, full) -- capacity was lowered
if now > last then -- else the clock went back: no refill
  local dt = now - last
  if dt >= cdiv(full - tokens, L) then
    tokens = full -- never forms dt*L for a large dt
  else
    tokens = tokens + dt * L -- dt*L < full - tokens + L
  end
  last = now
end

local allowed, retry, reason = 0, 0, 0
if c > cap then
  retry, reason = -1, 2
elseif tokens >= c * W then -- c*W <= cap*W
  tokens = tokens - c * W
  allowed = 1
else
  retry, reason = cdiv(c * W - tokens, L), 1
end
local reset = cdiv(full - tokens, L)
save(existed, reset, 't', tokens, 'l', last)
return {allowed, fdiv(tokens, W), reset, retry, 0, reason}
