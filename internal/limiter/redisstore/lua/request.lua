-- Requests over several keys: limiter.MemoryStore.TakeRequest, with the semantics of
-- limiter.RequestStore (prepended by scripts.go with arith.lua).
--
-- KEYS: the limiter keys of the takes, each once; takes name them by index.
-- ARGV[1] now: ms since the Unix epoch, or '' to read Redis's clock (once per call)
-- ARGV[2] minTTL: the least TTL to set, ms (0 with server time)
-- ARGV[3..]: groups, one per request, in order: the number of takes g, then g takes of 8
--   fields: key (index into KEYS), algorithm (1 fw, 2 swl, 3 swc, 4 tb, 5 lbm, 6 lbq), L,
--   W (window, ms), cap (Limit.Capacity), c (cost, 1..), M (LeakyBucket Queue's MaxDelay, ms),
--   shadow (1: the take does not deny its group, 0: it does; 3: a check, which denies its
--   group but never changes the state, 4 a shadow check; 2: a late charge, limiter.Charger, in a group of one
--   committed take, only for FixedWindow, calendar FixedWindow and TokenBucket); a cost -k is
--   a lease of up to k units (see lease below)
--   Algorithm 7 is a calendar FixedWindow: its W is the end and M the start of the window
--   that holds the caller's now (ms), computed by the caller in the rule's time zone.
-- Returns 8 integers per take, in order: {allowed 0/1, remaining, resetAfter ms,
-- retryAfter ms (-1: never), delay ms, reason, at, content}, reason 0 none, 1 limited, 2 cost exceeds capacity, 3 delay exceeds max delay, at the
-- instant the take was decided at (now, or the state's latest instant when the clock went
-- back) and content the bucket's tokens or level after the take, in scaled units (0 for the
-- window algorithms): what a refund (refund.lua) needs; then, once, the call's now.
--
-- A group whose count is negative, -g, is g takes committed whether or not they are allowed:
-- a Store.Take (g = 1), whose denial still brings the state forward to now, as in
-- limiter.MemoryStore.Take. The batcher coalesces the calls waiting at one moment into one
-- call, each a group, so that one call decides a hot key's whole batch at one instant.
--
-- A group's takes are decided in order, each on the state the call's earlier takes left (a key
-- repeated sees its earlier takes as charged), and the group is committed only if each of its
-- takes that is not shadow is allowed; a group that is not leaves every state as it was. Each
-- key's state is read at most once and written at most once, at the end, with save's
-- rules (below). The transitions are functions from a state to a result and a new state that
-- change nothing (the log's reads its list, never writes it); each names the Go function it
-- ports, formula for formula. Bounds of the arithmetic: see arith.lua.
local now
if ARGV[1] == '' then
  -- TIME is non-deterministic: the script is replicated by its effects (the default since
  -- Redis 5, the only mode since 7). seconds*1000 is about 1.8e12 < 2^53.
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local minTTL = tonumber(ARGV[2])

-- The string states. The windows' are integers in decimal, separated by spaces ("%d" formats
-- integers below 2^53 exactly): fw "<window> <count>", swc "<window> <prev> <curr>", the
-- shortest for their usually small numbers. The buckets' (tb <tokens, last>, lbm and lbq
-- <level, last>) are packBucket's 12 bytes (arith.lua), shorter than their decimal digits. A state is a
-- table of those numbers, false for an absent key.
local function decode(alg, raw)
  if not raw then return false end
  if alg >= 4 and alg <= 6 then
    local a, b = unpackBucket(raw)
    return {a, b}
  end
  local f = {}
  for x in string.gmatch(raw, '%-?%d+') do f[#f + 1] = tonumber(x) end
  return f
end

local function encode(alg, s)
  if alg >= 4 and alg <= 6 then return packBucket(s[1], s[2]) end
  if alg == 3 or alg == 7 then return string.format('%d %d %d', s[1], s[2], s[3]) end
  return string.format('%d %d', s[1], s[2])
end

-- limiter.FixedWindowState.take
local function fixedWindow(s, p)
  local L, W, c, t = p.L, p.W, p.c, now
  local win, n = 0, 0
  if s then win, n = s[1], s[2] end
  local w = fdiv(t, W)
  if w > win then
    win, n = w, 0
  elseif w < win then
    t = win * W -- clock went back: count it in the latest window
  end
  local e = (win + 1) * W - t -- ms to the end of the window; (win+1)*W <= now + W < 2^53
  local allowed, retry, reason = 0, 0, 0
  if c > L then
    retry, reason = -1, 2
  elseif n + c <= L then
    n = n + c
    allowed = 1
  else
    retry, reason = e, 1
  end
  local reset = 0
  if n > 0 then reset = e end
  return {allowed, math.max(0, L - n), reset, retry, 0, reason, t, 0}, {win, n}
end

-- limiter.CalendarWindowState.take, state "<start> <end> <count>"; p.M and p.W are the start
-- and end of now's window (the caller's clock)
local function calendarWindow(s, p)
  local L, c, t = p.L, p.c, now
  local st, en, n = 0, 0, 0
  if s then st, en, n = s[1], s[2], s[3] end
  if p.M > st then
    st, en, n = p.M, p.W, 0
  elseif p.M < st then
    t = st -- clock went back: count it in the latest window
  end
  local e = math.max(1, en - t)
  local allowed, retry, reason = 0, 0, 0
  if c > L then
    retry, reason = -1, 2
  elseif n + c <= L then
    n = n + c
    allowed = 1
  else
    retry, reason = e, 1
  end
  local reset = 0
  if n > 0 then reset = e end
  return {allowed, math.max(0, L - n), reset, retry, 0, reason, t, 0}, {st, en, n}
end

-- limiter.SlidingWindowCounterState.take
local function slidingWindowCounter(s, p)
  local L, W, c, t = p.L, p.W, p.c, now
  local win, pr, n = 0, 0, 0
  if s then win, pr, n = s[1], s[2], s[3] end
  local w = fdiv(t, W)
  if w == win then
    -- same window
  elseif w == win + 1 then
    win, pr, n = w, n, 0
  elseif w > win then
    win, pr, n = w, 0, 0
  else
    t = win * W -- clock went back
  end
  local e = t - win * W -- 0 <= e < W
  local rest = W - 1 - e -- (t-W, t] holds the last rest ticks of the previous window
  local allowed, retry, reason = 0, 0, 0
  if c > L then
    retry, reason = -1, 2
  elseif n + c <= L and pr * rest <= (L - n - c) * W then -- both sides <= L*W
    n = n + c
    allowed = 1
  elseif n + c <= L then
    local k = fdiv((L - n - c) * W, pr) -- later in this window (pr > 0), at e' = W - 1 - k
    retry, reason = W - 1 - k - e, 1
  else
    local e2 = 0 -- in the next window, where prev' = n and curr' = 0, at e2
    if n > 0 then e2 = math.max(0, W - 1 - fdiv((L - c) * W, n)) end
    retry, reason = W - e + e2, 1
  end
  local reset = 0
  if n > 0 then
    reset = rest + W
  elseif pr > 0 then
    reset = rest
  end
  return {allowed, math.max(0, L - n - cdiv(pr * rest, W)), reset, retry, 0, reason, t, 0}, {win, pr, n}
end

-- limiter.TokenBucketState.take; an absent key is a full bucket (Started = false)
local function tokenBucket(s, p)
  local L, W, cap, c = p.L, p.W, p.cap, p.c
  local full = cap * W -- <= 8.64e15
  local tokens, last = full, now
  if s then tokens, last = s[1], s[2] end
  tokens = math.min(tokens, full) -- capacity was lowered
  if now > last then -- else the clock went back: no refill
    local dt = now - last
    if dt >= cdiv(full - tokens, L) then
      tokens = full -- never forms dt*L for a large dt
    else
      tokens = tokens + dt * L
    end
    last = now
  end
  local allowed, retry, reason = 0, 0, 0
  if c > cap then
    retry, reason = -1, 2
  elseif tokens >= c * W then
    tokens = tokens - c * W
    allowed = 1
  else
    retry, reason = cdiv(c * W - tokens, L), 1
  end
  return {allowed, math.max(0, fdiv(tokens, W)), cdiv(full - tokens, L), retry, 0, reason, last, tokens}, {tokens, last}
end

-- The late charges (limiter's charge methods): the state brought forward as the take does,
-- then the units charged whether or not they fit: a window's count up to L, a bucket's tokens
-- down to limiter.MaxDebt.
local function lateCharge(s, p)
  local alg, L, c = p.alg, p.L, p.c
  if alg == 4 then
    local W, cap = p.W, p.cap
    local full = cap * W
    local tokens, last = full, now
    if s then tokens, last = s[1], s[2] end
    tokens = math.min(tokens, full)
    if now > last then
      local dt = now - last
      if dt >= cdiv(full - tokens, L) then
        tokens = full
      else
        tokens = tokens + dt * L
      end
      last = now
    end
    local floor = full - 9007199254740991 -- limiter.MaxDebt
    if c > fdiv(tokens - floor, W) then -- tokens - floor <= 2^53 - 1
      tokens = floor
    else
      tokens = tokens - c * W -- c*W <= tokens - floor
    end
    return {1, math.max(0, fdiv(tokens, W)), cdiv(full - tokens, L), 0, 0, 0, last, tokens}, {tokens, last}
  end
  local t, e, st = now, 0, nil
  local n = 0
  if alg == 7 then -- calendar: p.M, p.W are the start and end of now's window
    local a, b = 0, 0
    if s then a, b, n = s[1], s[2], s[3] end
    if p.M > a then
      a, b, n = p.M, p.W, 0
    elseif p.M < a then
      t = a
    end
    e, st = math.max(1, b - t), {a, b}
  else
    local W, win = p.W, 0
    if s then win, n = s[1], s[2] end
    local w = fdiv(t, W)
    if w > win then
      win, n = w, 0
    elseif w < win then
      t = win * W
    end
    e, st = (win + 1) * W - t, {win}
  end
  n = math.min(L, n + math.min(c, L))
  st[#st + 1] = n
  local reset = 0
  if n > 0 then reset = e end
  return {1, L - n, reset, 0, 0, 0, t, 0}, st
end

-- limiter.LeakyBucketState.takeMeter, or takeQueue when queue; an absent key is empty
local function leakyBucket(s, p, queue)
  local L, W, cap, c, M = p.L, p.W, p.cap, p.c, p.M
  local full = cap * W
  local level, last = 0, 0
  if s then level, last = s[1], s[2] end
  -- limiter.LeakyBucketState.leak
  level = math.min(level, full) -- capacity was lowered
  if now > last then -- else the clock went back: no leak
    local dt = now - last
    if dt >= cdiv(level, L) then
      level = 0 -- never forms dt*L for a large dt
    else
      level = level - dt * L
    end
    last = now
  end
  local allowed, retry, reason, delay, remaining = 0, 0, 0, 0, 0
  if queue then
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
  return {allowed, remaining, cdiv(level, L), retry, delay, reason, last, level}, {level, last}
end

-- A SlidingWindowLog list holds sum, T1, c1, T2, c2, ...: the sum of the c's, then the units c
-- admitted at each instant T, oldest first. The call sees a log as a table over the list:
--   t      the instant every take of the call on the log is decided at: now, or the newest
--          entry's instant if the clock went back (the same for each take, since an entry the
--          call adds is at t)
--   len2   the list's entry elements (its length - 1), drop how many of them lie before the
--          window (T <= t - W) and are dropped
--   sum    the units of the live entries; lastT, lastC the list's newest entry, lastC as this
--          call changed it, origC as in the list
--   pushT, pushC the one entry the call adds, pushT false when none
-- so that a decision reads the list and a commit writes it once.

-- loadLog reads the log at key as the call sees it before its first take, the expired entries
-- counted in drop (what limiter.SlidingWindowLogState.take drops first).
local function loadLog(key, W)
  local st = {t = now, len2 = 0, drop = 0, sum = 0, lastT = 0, lastC = 0, origC = 0, pushT = false, pushC = 0}
  local len = redis.call('LLEN', key)
  if len == 0 then return st end
  st.len2 = len - 1
  st.sum = tonumber(redis.call('LINDEX', key, 0))
  local tail = redis.call('LRANGE', key, -2, -1)
  st.lastT, st.lastC = tonumber(tail[1]), tonumber(tail[2])
  st.origC = st.lastC
  if now < st.lastT then st.t = st.lastT end -- clock went back
  local cutoff, drop, sum = st.t - W, 0, st.sum
  while drop < st.len2 do -- 32 entries at a time
    local chunk = redis.call('LRANGE', key, 1 + drop, drop + 64)
    local i = 1
    while i < #chunk and tonumber(chunk[i]) <= cutoff do
      sum = sum - tonumber(chunk[i + 1])
      drop = drop + 2
      i = i + 2
    end
    if i < #chunk or #chunk == 0 then break end
  end
  st.drop, st.sum = drop, sum
  return st
end

-- newestT is the log's newest instant, or nil for an empty log.
local function newestT(st)
  if st.pushT then return st.pushT end
  if st.len2 > st.drop then return st.lastT end
  return nil
end

-- limiter.SlidingWindowLogState.take (its drop already counted by loadLog)
local function slidingWindowLog(st, p, key)
  local L, W, c, t = p.L, p.W, p.c, st.t
  local s = {}
  for k, v in pairs(st) do s[k] = v end
  local allowed, retry, reason = 0, 0, 0
  if c > L then
    retry, reason = -1, 2
  elseif s.sum + c <= L then
    allowed = 1
    if newestT(s) == t then
      if s.pushT then s.pushC = s.pushC + c else s.lastC = s.lastC + c end
    else
      s.pushT, s.pushC = t, c
    end
    s.sum = s.sum + c
  else
    reason = 1
    -- the first entry, oldest first, at which the running total reaches sum + c - L; it is
    -- reached within the log because c <= L
    local need = s.sum + c - L
    local from = 1 + s.drop -- element index of the oldest live entry's T
    while retry == 0 and from < s.len2 do
      local chunk = redis.call('LRANGE', key, from, math.min(from + 63, s.len2))
      for i = 1, #chunk - 1, 2 do
        local cost = tonumber(chunk[i + 1])
        if from + i == s.len2 then cost = s.lastC end -- the newest entry, as this call left it
        need = need - cost
        if need <= 0 then
          retry = tonumber(chunk[i]) + W - t -- > 0: the entry is alive
          break
        end
      end
      from = from + 64
    end
    if retry == 0 and s.pushT then retry = s.pushT + W - t end -- the pushed entry, the last
  end
  local reset, nt = 0, newestT(s)
  if nt then reset = nt + W - t end
  return {allowed, math.max(0, L - s.sum), reset, retry, 0, reason, t, 0}, s
end

-- saveLog writes the log's changes: trims the dropped entries, updates the newest entry's
-- units, appends the new entry, writes the sum, and sets the TTL (or lets an emptied list go).
local function saveLog(key, st, W)
  local changed = st.drop > 0 or st.pushT or st.lastC ~= st.origC
  if not changed and minTTL == 0 then return end -- with server time its TTL is still right
  local slot = st.len2 > 0 -- element 0 is the sum
  if st.drop > 0 then
    redis.call('LTRIM', key, 1 + st.drop, -1) -- trims the sum too; an emptied list is deleted
    slot = false
  end
  if st.len2 > st.drop and st.lastC ~= st.origC then redis.call('LSET', key, -1, st.lastC) end
  if st.pushT then redis.call('RPUSH', key, st.pushT, st.pushC) end
  local nt = newestT(st)
  if nt then
    if slot then
      redis.call('LSET', key, 0, st.sum)
    else
      redis.call('LPUSH', key, st.sum)
    end
    redis.call('PEXPIRE', key, math.max(nt + W - st.t, minTTL))
  end
end

-- save writes a string state with a TTL of at least reset ms, or deletes a state equivalent to
-- an absent key (reset == 0).
--  - With explicit time (minTTL > 0) a key that exists is kept, like limiter.MemoryStore keeps
--    its entry, and a new one is only written when reset > 0, like MemoryStore: the two then
--    see the same state even when instants go backwards. Every write renews the TTL, since the
--    caller's instants say nothing about Redis's clock.
--  - With server time an unchanged state is not written again: its TTL, set when it was
--    written, already ends when it becomes equivalent to an absent key.
local function save(key, raw, reset, state)
  if minTTL > 0 then
    if reset > 0 or raw then
      redis.call('SET', key, state, 'PX', math.max(reset, minTTL))
    end
  elseif reset > 0 then
    if state ~= raw then
      redis.call('SET', key, state, 'PX', reset)
    end
  elseif raw then
    redis.call('DEL', key)
  end
end

-- keys[k] is KEYS[k] as the committed groups left it: {alg, W, raw (string states), s (the
-- state), reset (of the last committed take), dirty}; loaded at its first take.
local keys = {}
local function load(k, p)
  local e = keys[k]
  if e then return e end
  e = {alg = p.alg, W = p.W, dirty = false, reset = 0}
  if p.alg == 2 then
    e.s = loadLog(KEYS[k], p.W)
  else
    e.raw = redis.call('GET', KEYS[k])
    e.s = decode(p.alg, e.raw)
  end
  keys[k] = e
  return e
end

-- Leases (limiter.MemoryStore.Issue): a take whose cost is -k issues as many of k units as k
-- takes of cost 1 at this instant would: min(k, cap) if they fit as one take, else the
-- Remaining of its denial (each transition's Remaining is the most that fit), charged as one
-- take; none when none fit, and then the result is a take of one unit's. Its 5th field (delay, 0 for every leasable algorithm) is the number
-- of units issued. The second decision starts again from the state the call had.
local function decide(s, p, key)
  local alg = p.alg
  if alg == 4 then return tokenBucket(s, p) end
  if alg == 1 then return fixedWindow(s, p) end
  if alg == 2 then return slidingWindowLog(s, p, key) end
  if alg == 3 then return slidingWindowCounter(s, p) end
  if alg == 7 then return calendarWindow(s, p) end
  return leakyBucket(s, p, alg == 6)
end
local function lease(s, p, key)
  p.c = math.min(-p.c, p.cap)
  local r, s2 = decide(s, p, key)
  if r[1] == 0 and r[6] == 1 and r[2] > 0 then
    p.c = math.min(p.c, r[2])
    r, s2 = decide(s, p, key)
  end
  if r[1] == 0 and p.c > 1 then -- none fit: the denial of one unit, what a request of 1 gets
    p.c = 1
    r, s2 = decide(s, p, key)
  end
  r[5] = 0
  if r[1] == 1 then r[5] = p.c end
  return r, s2
end

-- The loop allocates as little per take as it can (Lua tables are what a script spends its
-- time on): one parameter table p for every take, a Take's group committed in place.
local out, n = {}, 0
local p = {}
local i, nargv = 3, #ARGV
while i <= nargv do
  local g = tonumber(ARGV[i])
  i = i + 1
  local always = g < 0
  if always then g = -g end
  local tent = false -- key index: {state, reset} after the group's takes so far
  if not always then tent = {} end
  local admit = true
  for _ = 1, g do
    local k = tonumber(ARGV[i])
    p.alg, p.L, p.W = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
    p.cap, p.c, p.M = tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6])
    local flag = ARGV[i + 7]
    local shadow, check = flag == '1' or flag == '4', flag == '3' or flag == '4'
    i = i + 8
    local e = load(k, p)
    local s = e.s
    if tent and tent[k] then s = tent[k][1] end
    local alg, r, s2 = p.alg
    if p.c < 0 then
      r, s2 = lease(s, p, KEYS[k])
    elseif flag == '2' then
      r, s2 = lateCharge(s, p)
    elseif alg == 4 then
      r, s2 = tokenBucket(s, p)
    elseif alg == 1 then
      r, s2 = fixedWindow(s, p)
    elseif alg == 2 then
      r, s2 = slidingWindowLog(s, p, KEYS[k])
    elseif alg == 3 then
      r, s2 = slidingWindowCounter(s, p)
    elseif alg == 7 then
      r, s2 = calendarWindow(s, p)
    else
      r, s2 = leakyBucket(s, p, alg == 6)
    end
    if check then
      if r[1] == 0 and not shadow and not always then admit = false end
    elseif always then
      e.s, e.reset, e.dirty = s2, r[3], true
    else
      tent[k] = {s2, r[3]}
      if r[1] == 0 and not shadow then admit = false end
    end
    for j = 1, 8 do out[n + j] = r[j] end
    n = n + 8
  end
  if tent and admit then
    for k, t in pairs(tent) do
      local e = keys[k]
      e.s, e.reset, e.dirty = t[1], t[2], true
    end
  end
end

for k = 1, #KEYS do
  local e = keys[k]
  if e and e.dirty then
    if e.alg == 2 then
      saveLog(KEYS[k], e.s, e.W)
    else
      save(KEYS[k], e.raw, e.reset, encode(e.alg, e.s))
    end
  end
end
out[n + 1] = now
return out
