-- The inverse of the charges one call of request.lua made on one key, for a request on Redis
-- Cluster that another rule denied (see Store.TakeRequest; prepended by scripts.go with
-- arith.lua).
--
-- KEYS[1]: the limiter key. ARGV[1] minTTL (0 with server time); ARGV[2] algorithm (as in
-- request.lua); ARGV[3] L, ARGV[4] W, ARGV[5] cap; ARGV[6] c, the units charged; ARGV[7] at and
-- ARGV[8] content, request.lua's 7th and 8th fields of the last take of the call on the key.
-- Returns the units given back (scaled units for the buckets): c (c*W), or fewer when the
-- state has moved on or holds less than c to give back.
--
-- A refund never leaves a state more permissive than it would be had the charges not been
-- made (the other requests' charges unchanged), and is exact while that can be known:
--   - FixedWindow: the count, in the charge's window only (once it rolled, the charge is gone);
--     the same for a calendar window (algorithm 7), whose state holds its bounds.
--   - SlidingWindowCounter: the current count in the charge's window, the previous one once the
--     window rolled once.
--   - SlidingWindowLog: the units of the entry at the charge's instant.
--   - TokenBucket: the tokens, up to the capacity, less what the bucket would have lost to its
--     capacity without the charge between the charge and the state's instant (at most the
--     refill in that time beyond the room it had): exact when no other request has refilled
--     the state since, or when that room was not reached. The refill after the state's instant
--     is computed later, from the refunded state, capped as it would have been.
--   - LeakyBucket: the level, down to 0, less what the bucket would have leaked below 0
--     without the charge (likewise).
-- (The same bound gives nothing back to a key that expired and was written anew: it expired
-- no earlier than the charge's refill or leak would have made it fresh.)
-- The key keeps its TTL: a state that holds less becomes equivalent to an absent key no later
-- than it would have. A state the refund makes equivalent to an absent key is deleted with
-- server time, and kept with explicit time (request.lua's save rules).
local minTTL = tonumber(ARGV[1])
local alg = tonumber(ARGV[2])
local L = tonumber(ARGV[3])
local W = tonumber(ARGV[4])
local cap = tonumber(ARGV[5])
local c = tonumber(ARGV[6])
local at = tonumber(ARGV[7])
local content = tonumber(ARGV[8])
local key = KEYS[1]

-- put writes a string state, keeping the key's TTL, or deletes it when fresh (equivalent to
-- an absent key) and the time is the server's.
local function put(state, fresh)
  if fresh and minTTL == 0 then
    redis.call('DEL', key)
    return
  end
  local ttl = redis.call('PTTL', key)
  if ttl > 0 then
    redis.call('SET', key, state, 'PX', ttl)
  else
    redis.call('SET', key, state) -- it had no TTL (the store always sets one)
  end
end

if alg == 2 then
  -- SlidingWindowLog: the list sum, T1, c1, ...; the charge's entry is at T = at, among the
  -- newest, so the search starts at the end, 32 entries at a time.
  local len = redis.call('LLEN', key)
  local hi, found, cost = len - 1, nil, 0 -- hi: element index of a c
  while hi >= 2 and not found do
    local lo = math.max(1, hi - 63) -- element index of a T
    local chunk = redis.call('LRANGE', key, lo, hi)
    local older = false
    for i = #chunk - 1, 1, -2 do
      local t = tonumber(chunk[i])
      if t == at then
        found, cost = lo + i - 1, tonumber(chunk[i + 1])
        break
      elseif t < at then
        older = true -- sorted: the entry is gone
        break
      end
    end
    if older then break end
    hi = lo - 1
  end
  if not found then return 0 end
  local back = math.min(c, cost)
  local sum = tonumber(redis.call('LINDEX', key, 0)) - back
  if cost > back then
    redis.call('LSET', key, found + 1, cost - back)
  else
    -- remove the pair: mark it with a value no element has, then LREM the marks
    redis.call('LSET', key, found, '#')
    redis.call('LSET', key, found + 1, '#')
    redis.call('LREM', key, 2, '#')
  end
  if redis.call('LLEN', key) == 1 then
    redis.call('DEL', key) -- no entry left: an absent list is an empty log
  else
    redis.call('LSET', key, 0, sum)
  end
  return back
end

local raw = redis.call('GET', key)
if not raw then return 0 end
local f = {}
if alg >= 4 and alg <= 6 then
  f[1], f[2] = unpackBucket(raw) -- the buckets' layout (arith.lua)
else
  for x in string.gmatch(raw, '%-?%d+') do f[#f + 1] = tonumber(x) end
end

if alg == 1 then
  -- FixedWindow "<window> <count>": the charge's window only
  if f[1] ~= floor(at / W) then return 0 end
  local back = math.min(c, f[2])
  if back == 0 then return 0 end
  put(string.format('%d %d', f[1], f[2] - back), f[2] == back)
  return back
elseif alg == 7 then
  -- calendar FixedWindow "<start> <end> <count>": the charge's window only
  if at < f[1] or at >= f[2] then return 0 end
  local back = math.min(c, f[3])
  if back == 0 then return 0 end
  put(string.format('%d %d %d', f[1], f[2], f[3] - back), f[3] == back)
  return back
elseif alg == 3 then
  -- SlidingWindowCounter "<window> <prev> <curr>": curr in the charge's window, prev once it
  -- has rolled once
  local w, back = floor(at / W), 0
  if f[1] == w then
    back = math.min(c, f[3])
    f[3] = f[3] - back
  elseif f[1] == w + 1 then
    back = math.min(c, f[2])
    f[2] = f[2] - back
  else
    return 0
  end
  put(string.format('%d %d %d', f[1], f[2], f[3]), f[2] == 0 and f[3] == 0)
  return back
elseif alg == 4 then
  -- TokenBucket <tokens, last>. Without the charges the bucket held before = content + c*W
  -- at at; by last, dt ms later, it would have lost at most max(0, before + dt*L - full) to
  -- the capacity.
  local full = cap * W
  local tokens, dt = math.min(f[1], full), math.max(0, f[2] - at)
  local before = content + c * W
  local back = c * W
  if dt >= cdiv(full - before + c * W, L) then -- full - before + c*W <= full
    back = 0 -- the loss covers the charges; dt*L is not formed
  else
    back = back - math.max(0, before + dt * L - full) -- dt*L < full + L
  end
  back = math.min(back, full - tokens)
  if back <= 0 then return 0 end
  put(packBucket(tokens + back, f[2]), tokens + back == full)
  return back
else
  -- LeakyBucket <level, last>. Without the charges the level was before = content - c*W at
  -- at; by last, dt ms later, it would have lost at most max(0, dt*L - before) below 0.
  local level, dt = math.min(f[1], cap * W), math.max(0, f[2] - at)
  local before = content - c * W
  local back = c * W
  if dt >= cdiv(content, L) then -- content = before + c*W <= full
    back = 0
  else
    back = back - math.max(0, dt * L - before) -- dt*L < full + L
  end
  back = math.min(back, level)
  if back <= 0 then return 0 end
  put(packBucket(level - back, f[2]), level == back)
  return back
end
