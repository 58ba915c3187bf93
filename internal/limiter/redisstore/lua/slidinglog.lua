-- SlidingWindowLog: limiter.SlidingWindowLogState.Take.
-- KEYS[1] list: sum, T1, c1, T2, c2, ...: the sum of the c's, then the units c admitted at each
-- instant T, oldest first, at most one entry per instant and L entries. An absent list is an
-- empty log, the same as limiter's empty state, so nothing else needs remembering.
local len = redis.call('LLEN', KEYS[1])
local n2 = 0            -- 2 * entries
local sum, newestT = 0, nil
local slot = false      -- whether element 0 is the sum
if len > 0 then
  n2 = len - 1
  slot = true
  sum = tonumber(redis.call('LINDEX', KEYS[1], 0))
  newestT = tonumber(redis.call('LINDEX', KEYS[1], -2))
  if now < newestT then now = newestT end -- clock went back
  -- drop the entries with T <= now - W, reading 32 at a time
  local cutoff = now - W
  local drop = 0
  while drop < n2 do
    local chunk = redis.call('LRANGE', KEYS[1], 1 + drop, drop + 64)
    local i = 1
    while i < #chunk and tonumber(chunk[i]) <= cutoff do
      sum = sum - tonumber(chunk[i + 1])
      drop = drop + 2
      i = i + 2
    end
    if i < #chunk or #chunk == 0 then break end
  end
  if drop > 0 then
    -- trims the sum too (written back below); an emptied list is deleted
    redis.call('LTRIM', KEYS[1], 1 + drop, -1)
    n2 = n2 - drop
    slot = false
  end
end

local allowed, retry, reason = 0, 0, 0
if c > L then
  retry, reason = -1, 2
elseif sum + c <= L then
  allowed = 1
  if n2 > 0 and newestT == now then
    redis.call('LSET', KEYS[1], -1, tonumber(redis.call('LINDEX', KEYS[1], -1)) + c)
  else
    redis.call('RPUSH', KEYS[1], now, c)
    n2 = n2 + 2
    newestT = now
  end
  sum = sum + c
else
  reason = 1
  -- the first entry, oldest first, at which the running total reaches sum + c - L; it is
  -- reached within the log because c <= L
  local need = sum + c - L
  local from = 0
  if slot then from = 1 end
  while retry == 0 do
    local chunk = redis.call('LRANGE', KEYS[1], from, from + 63)
    if #chunk == 0 then break end
    for i = 1, #chunk - 1, 2 do
      need = need - tonumber(chunk[i + 1])
      if need <= 0 then
        retry = tonumber(chunk[i]) + W - now -- > 0: the entry is alive
        break
      end
    end
    from = from + 64
  end
end

local reset = 0
if n2 > 0 then
  reset = newestT + W - now
  if slot then
    redis.call('LSET', KEYS[1], 0, sum)
  else
    redis.call('LPUSH', KEYS[1], sum)
  end
  redis.call('PEXPIRE', KEYS[1], math.max(reset, minTTL))
end
return {allowed, math.max(0, L - sum), reset, retry, 0, reason}
