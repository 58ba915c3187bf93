-- TokenBucket: limiter.TokenBucketState.Take. KEYS[1]: "<tokens> <instant>", the tokens in
-- scaled units (one token = W units, L units per ms) and the instant (ms) they were counted at.
-- An absent key is a full bucket (Started = false).
local raw, st = load()
local full = cap * W -- <= MaxLimit * MaxWindow = 8.64e15
local tokens, last
if raw then
  tokens, last = st[1], st[2]
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
save(raw, reset, string.format('%d %d', tokens, last))
return {allowed, fdiv(tokens, W), reset, retry, 0, reason}
