-- Usage decided elsewhere, added to one key without denying: the units a sidecar admitted on
-- its local share while Redis was unreachable (see Store.Charge; prepended by scripts.go with
-- arith.lua).
--
-- KEYS[1]: the limiter key. ARGV[1] now: ms since the Unix epoch, or '' to read Redis's clock;
-- ARGV[2] minTTL (0 with server time); ARGV[3] algorithm (as in request.lua); ARGV[4] L,
-- ARGV[5] W, ARGV[6] cap; ARGV[7] c, the units to charge (>= 1).
-- Returns the units charged: c, or fewer when the state cannot hold more (it is then as used
-- up as it can be: a window's count at L, a log's sum at L, a bucket empty of tokens or full of
-- level), so the state stays within the bounds that keep the arithmetic exact.
--
-- The state is first brought forward to now as request.lua's take does (a window rolled, a
-- bucket refilled or leaked, a log's expired entries dropped), then charged at now: the units
-- count as spent at the call's instant, which for a bucket or a log is no earlier than they
-- were, so the state is never more permissive than had they been charged when spent. The key
-- then gets the TTL a take leaving that state would set (request.lua's save rules).
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local minTTL = tonumber(ARGV[2])
local alg = tonumber(ARGV[3])
local L, W, cap, c = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local key = KEYS[1]

local function put(state, ttl)
  redis.call('SET', key, state, 'PX', math.max(ttl, minTTL, 1))
end

if alg == 2 then
  -- SlidingWindowLog: the list sum, T1, c1, T2, c2, ..., oldest first. Drop what expired,
  -- then add the units at now (merged into the newest entry when it is at now).
  local t = now
  local len = redis.call('LLEN', key)
  local sum = 0
  if len > 0 then
    sum = tonumber(redis.call('LINDEX', key, 0))
    local newest = tonumber(redis.call('LINDEX', key, -2))
    if newest > t then t = newest end -- clock went back: charge at the newest entry
    local drop = 0
    while 1 + drop < len do
      local chunk = redis.call('LRANGE', key, 1 + drop, drop + 64)
      local i = 1
      while i < #chunk and tonumber(chunk[i]) <= t - W do
        sum = sum - tonumber(chunk[i + 1])
        drop = drop + 2
        i = i + 2
      end
      if i < #chunk or #chunk == 0 then break end
    end
    if drop > 0 then
      redis.call('LTRIM', key, 1 + drop, -1) -- the sum goes too
      if 1 + drop < len then redis.call('LPUSH', key, sum) end
      len = redis.call('LLEN', key)
    end
  end
  local add = math.min(c, L - sum)
  if add <= 0 then return 0 end
  if len > 0 and tonumber(redis.call('LINDEX', key, -2)) == t then
    redis.call('LSET', key, -1, tonumber(redis.call('LINDEX', key, -1)) + add)
    redis.call('LSET', key, 0, sum + add)
  else
    if len == 0 then
      redis.call('RPUSH', key, sum + add, t, add)
    else
      redis.call('RPUSH', key, t, add)
      redis.call('LSET', key, 0, sum + add)
    end
  end
  redis.call('PEXPIRE', key, math.max(t + W - now, minTTL))
  return add
end

local raw = redis.call('GET', key)
if alg == 1 or alg == 3 then
  -- The windows: "<window> <count>" (fw) or "<window> <prev> <curr>" (swc), rolled to now's
  -- window as the takes roll them; a window before the state's (clock went back) is charged
  -- in the state's.
  local f = {}
  if raw then
    for x in string.gmatch(raw, '%-?%d+') do f[#f + 1] = tonumber(x) end
  end
  local w = fdiv(now, W)
  local win, pr, n = w, 0, 0
  if alg == 1 then
    if raw and f[1] >= w then win, n = f[1], f[2] end
  elseif raw then
    if f[1] == w then
      pr, n = f[2], f[3]
    elseif f[1] == w - 1 then
      pr = f[3]
    elseif f[1] > w then
      win, pr, n = f[1], f[2], f[3]
    end
  end
  local add = math.min(c, L - n)
  if add <= 0 then return 0 end
  n = n + add
  local t = math.max(now, win * W)
  local e = (win + 1) * W - t -- ms to the end of the charged window
  if alg == 1 then
    put(string.format('%d %d', win, n), e)
  else
    put(string.format('%d %d %d', win, pr, n), e + W)
  end
  return add
end

-- The buckets, packBucket(a, last): tokens (TokenBucket, absent = full) or level (LeakyBucket,
-- absent = empty), in scaled units (one unit is W).
local full = cap * W
local a, last
if raw then
  a, last = unpackBucket(raw)
  a = math.min(a, full)
elseif alg == 4 then
  a, last = full, now
else
  a, last = 0, now
end
if now > last then
  local dt = now - last
  if alg == 4 then
    if dt >= cdiv(full - a, L) then a = full else a = a + dt * L end
  else
    if dt >= cdiv(a, L) then a = 0 else a = a - dt * L end
  end
  last = now
end
local add
if alg == 4 then
  add = math.min(c, fdiv(a, W))
  if add <= 0 then return 0 end
  a = a - add * W
  put(packBucket(a, last), cdiv(full - a, L))
else
  add = math.min(c, fdiv(full - a, W))
  if add <= 0 then return 0 end
  a = a + add * W
  put(packBucket(a, last), cdiv(a, L))
end
return add
