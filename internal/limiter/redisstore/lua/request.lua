-- Requests over several keys: limiter.MemoryStore.TakeRequest, with the semantics of
-- limiter.RequestStore (prepended by scripts.go with arith.lua).
--
-- KEYS: the limiter keys of the takes, each once; takes name them by index.
-- ARGV[1] now: ms since the Unix epoch, or '' to read Redis's clock (once per call)
-- ARGV[2] the call's numbers N, each a little-endian double (8 bytes; every one an integer
--   below 2^53 in magnitude, which a double holds exactly): one struct.unpack reads them all,
--   where a decimal argument each cost Redis an argument and the script a strtod. They are:
-- N[1] minTTL: the least TTL to set, ms (0 with server time)
-- N[2] the kinds of take the call holds (below), as a sum of 2^kind
-- N[3] nl, then nl limits of 5 fields each: algorithm (1 fw, 2 swl, 3 swc, 4 tb, 5 lbm,
--   6 lbq, 7 calendar fw, 8 concurrency), L, W (window, ms), cap (Limit.Capacity), M
--   (LeakyBucket Queue's MaxDelay, ms). A calendar FixedWindow's W is the end and M the start
--   of the window that holds the caller's now (ms), computed by the caller in the rule's time
--   zone. A Concurrency limit's W is how long a holding lasts unless renewed, and M the
--   number of the Store that holds (its holder id); a take of it has the holding's number in
--   place of its cost (see concurrency below).
-- N[4 + 5*nl ..]: the takes in order, one integer each (request.go's scriptCall.add):
--   v = f + 128 * ((k - 1) + 512 * ((l - 1) + 512 * c))
--   k the take's key (index into KEYS), l its limit (index into the limits), c its cost
--   (0 <= c < 2^27), and the flags f:
--     f % 8  the kind: 0 an enforced take, 1 shadow (it does not deny its group), 2 a late
--            charge (limiter.Charger: FixedWindow, calendar FixedWindow and TokenBucket only),
--            3 a check (it denies its group but never changes the state), 4 a shadow check,
--            5 a lease of up to c units (see lease below), 6 usage to add, of up to c units
--            (see usage below)
--     8      the reply carries the take's at and content (below)
--     16     the take ends its group: a request (limiter.RequestStore) is a group of takes
--     32     the take is a group of its own, committed whether or not it is allowed: a
--            Store.Take, Charge or Issue, whose denial still brings the state forward to now,
--            as in limiter.MemoryStore.Take
--     64     k, l and c did not fit: v = f, and they follow as the next three numbers
--   A negative integer -r after a take of flag 32 stands for r more takes equal to it (a hot
--   key's batch is mostly the same Take over and over).
-- A cost above what the take's kind can tell apart is clamped by the caller: a take's to
-- max(L, cap) + 1 (every transition denies it alike), a lease's to cap, a late charge's to 2^53.
--
-- Returns per take, in order: r1 = allowed (0/1) + 2 x + 4 s + 8 reason + 32 b + 64 remaining
-- + 2^33 resetAfter (ms) when resetAfter < 2^20, else (b = 1) r1 without it, then resetAfter;
-- then, when x is 1, the one of retryAfter (ms, -1: never) and delay (ms) that can be
-- non-zero (delay when allowed, retryAfter when not; both are 0 when x is 0); then, when s is
-- 1 (flag 8), at and content. reason 0 none, 1 limited, 2 cost exceeds capacity, 3 delay
-- exceeds max delay; at the instant the take was decided at (now, or the state's latest
-- instant when the clock went back) and content the bucket's tokens or level after the take,
-- in scaled units (0 for the window algorithms): what a refund (refund.lua) needs. Every
-- integer stays below 2^53 (remaining <= limiter.MaxLimit < 2^27).
-- In place of the replies of k >= 1 takes of a run (a Take repeated, below): -k, then the
-- instant and the state (three values, 0 for none) the take before them left, from which
-- request.go's decoder replays them.
--
-- The batcher coalesces the calls waiting at one moment into one call, each a group, so that
-- one call decides a hot key's whole batch at one instant. A group's takes are decided in
-- order, each on the state the call's earlier takes left (a key repeated sees its earlier
-- takes as charged), and the group is committed only if each of its takes that is not shadow
-- is allowed; a group that is not leaves every state as it was. Each key's state is read at
-- most once and written at most once, at the end (the last loop, below). The transitions
-- are functions from a limit q, a cost c and a state (up to three values, nil for an absent
-- key) to a result and a new state, which change nothing (the log's reads its list, never
-- writes it); each names the Go function it ports, formula for formula. Bounds of the
-- arithmetic: see arith.lua.
--
-- What a call costs Redis is mostly fixed (the call, TIME, a GET and a SET per key) and then
-- per take: so nothing is allocated per take but a log's state (Lua tables are what a script
-- spends its time on), and only the transitions of the algorithms the call uses are defined
-- (each closure is made anew on every call).
local ARGV, KEYS, call = ARGV, KEYS, redis.call -- locals: a global is a table lookup
local now
if ARGV[1] == '' then
  -- TIME is non-deterministic: the script is replicated by its effects (the default since
  -- Redis 5, the only mode since 7). seconds*1000 is about 1.8e12 < 2^53.
  local t = call('TIME')
  now = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
-- The numbers, read 200 at a time (a C function's results are bounded by the Lua stack).
local N, nn = {}, #ARGV[2] / 8
do
  local blob, got, pos = ARGV[2], 0, 1
  while got < nn do
    local m = min(200, nn - got)
    local part = {struct.unpack('<' .. string.rep('d', m), blob, pos)}
    if got == 0 and m == nn then
      N = part -- the usual call: no copy
    else
      for j = 1, m do N[got + j] = part[j] end
    end
    got, pos = got + m, part[m + 1]
  end
  N[nn + 1] = nil -- the position unpack returned last
end
local minTTL, kinds = N[1], N[2]

-- The limits: q = {alg, L, W, cap, M, full}, full = cap*W for the buckets (<= 8.64e15); and
-- transition[alg] set (to true, then to its function below) for the algorithms they use.
local limits, transition = {}, {}
local nl = N[3]
for j = 1, nl do
  local b = 5 * j - 2
  local alg, W, cap = N[b + 1], N[b + 3], N[b + 4]
  local full = 0
  if alg >= 4 and alg <= 6 then full = cap * W end
  limits[j] = {alg, N[b + 2], W, cap, N[b + 5], full}
  transition[alg] = true
end

-- transition[alg](q, c, s1, s2, s3, key) decides a take of cost c on a state, returning
-- allowed, remaining, resetAfter, retryAfter, delay, reason, at, content and the new state.
local uses = transition
local windowTake, rollFixed, rollCalendar, rollCounter, refill, leak, lateCharge, lease, usage
local loadLog, newestT, copyLog, addLog, saveLog

if uses[1] or uses[7] then
  -- The fixed windows' decision, shared by FixedWindow and calendar FixedWindow: c units into
  -- a window holding n, of limit L, that ends e ms after the decision. Returns allowed,
  -- remaining, reset, retry, reason and the new count.
  windowTake = function(L, c, n, e)
    local allowed, retry, reason = 0, 0, 0
    if c > L then
      retry, reason = -1, 2
    elseif n + c <= L then
      n, allowed = n + c, 1
    else
      retry, reason = e, 1
    end
    local reset = 0
    if n > 0 then reset = e end
    return allowed, max(0, L - n), reset, retry, reason, n
  end
end

if uses[1] then
  -- limiter.FixedWindowState brought forward to now: the instant t of the decision, the
  -- window and its count.
  rollFixed = function(W, win, n)
    local t = now
    if not win then win, n = 0, 0 end
    local w = floor(t / W)
    if w > win then
      win, n = w, 0
    elseif w < win then
      t = win * W -- clock went back: count it in the latest window
    end
    return t, win, n
  end

  -- limiter.FixedWindowState.take, state <window, count>
  transition[1] = function(q, c, win, n)
    local W, t = q[3], 0
    t, win, n = rollFixed(W, win, n)
    -- (win+1)*W <= now + W < 2^53
    local allowed, remaining, reset, retry, reason
    allowed, remaining, reset, retry, reason, n = windowTake(q[2], c, n, (win + 1) * W - t)
    return allowed, remaining, reset, retry, 0, reason, t, 0, win, n
  end
end

if uses[7] then
  -- limiter.CalendarWindowState brought forward: q[5] and q[3] are the start and end of now's
  -- window (the caller's clock).
  rollCalendar = function(q, st, en, n)
    local t = now
    if not st then st, en, n = 0, 0, 0 end
    local m = q[5]
    if m > st then
      st, en, n = m, q[3], 0
    elseif m < st then
      t = st -- clock went back: count it in the latest window
    end
    return t, st, en, n
  end

  -- limiter.CalendarWindowState.take, state <start, end, count>
  transition[7] = function(q, c, st, en, n)
    local t
    t, st, en, n = rollCalendar(q, st, en, n)
    local allowed, remaining, reset, retry, reason
    allowed, remaining, reset, retry, reason, n = windowTake(q[2], c, n, max(1, en - t))
    return allowed, remaining, reset, retry, 0, reason, t, 0, st, en, n
  end
end

if uses[3] then
  -- limiter.SlidingWindowCounterState brought forward to now: the instant t of the decision,
  -- the window and its two counts.
  rollCounter = function(W, win, pr, n)
    local t = now
    if not win then win, pr, n = 0, 0, 0 end
    local w = floor(t / W)
    if w == win then
      -- same window
    elseif w == win + 1 then
      win, pr, n = w, n, 0
    elseif w > win then
      win, pr, n = w, 0, 0
    else
      t = win * W -- clock went back
    end
    return t, win, pr, n
  end

  -- limiter.SlidingWindowCounterState.take, state <window w, units in w-1, units in w>
  transition[3] = function(q, c, win, pr, n)
    local L, W, t = q[2], q[3], 0
    t, win, pr, n = rollCounter(W, win, pr, n)
    local e = t - win * W -- 0 <= e < W
    local rest = W - 1 - e -- (t-W, t] holds the last rest ticks of the previous window
    local allowed, retry, reason = 0, 0, 0
    if c > L then
      retry, reason = -1, 2
    elseif n + c <= L and pr * rest <= (L - n - c) * W then -- both sides <= L*W
      n = n + c
      allowed = 1
    elseif n + c <= L then
      local k = floor((L - n - c) * W / pr) -- later in this window (pr > 0), at e' = W - 1 - k
      retry, reason = W - 1 - k - e, 1
    else
      local e2 = 0 -- in the next window, where prev' = n and curr' = 0, at e2
      if n > 0 then e2 = max(0, W - 1 - floor((L - c) * W / n)) end
      retry, reason = W - e + e2, 1
    end
    local reset = 0
    if n > 0 then
      reset = rest + W
    elseif pr > 0 then
      reset = rest
    end
    return allowed, max(0, L - n - cdiv(pr * rest, W)), reset, retry, 0, reason, t, 0, win, pr, n
  end
end

if uses[4] then
  -- limiter.TokenBucketState brought forward to now (its refill); an absent key is a full
  -- bucket (Started = false).
  refill = function(q, tokens, last)
    local full = q[6]
    if not tokens then return full, now end
    if tokens > full then tokens = full end -- capacity was lowered
    if now > last then -- else the clock went back: no refill
      local dt = now - last
      if dt >= cdiv(full - tokens, q[2]) then
        tokens = full -- never forms dt*L for a large dt
      else
        tokens = tokens + dt * q[2]
      end
      last = now
    end
    return tokens, last
  end

  -- limiter.TokenBucketState.take, state <tokens, last>. (Comparisons stand for min and max
  -- here: a call of them costs more than the rest of a repeated take's decision.)
  transition[4] = function(q, c, tokens, last)
    local L, W, cw = q[2], q[3], c * q[3]
    tokens, last = refill(q, tokens, last)
    local allowed, retry, reason = 0, 0, 0
    if c > q[4] then
      retry, reason = -1, 2
    elseif tokens >= cw then
      tokens = tokens - cw
      allowed = 1
    else
      retry, reason = cdiv(cw - tokens, L), 1
    end
    local remaining = 0 -- max(0, floor(tokens / W)): tokens < 0 is a debt
    if tokens >= W then remaining = floor(tokens / W) end
    return allowed, remaining, cdiv(q[6] - tokens, L), retry, 0, reason, last, tokens, tokens, last
  end
end

if uses[5] or uses[6] then
  -- limiter.LeakyBucketState.leak: the level brought forward to now; an absent key is empty.
  leak = function(q, level, last)
    local full = q[6]
    if not level then return 0, now end
    level = min(level, full) -- capacity was lowered
    if now > last then -- else the clock went back: no leak
      local dt = now - last
      if dt >= cdiv(level, q[2]) then
        level = 0 -- never forms dt*L for a large dt
      else
        level = level - dt * q[2]
      end
      last = now
    end
    return level, last
  end

  -- limiter.LeakyBucketState.takeMeter, or takeQueue for alg 6, state <level, last>
  local function leakyBucket(q, c, level, last)
    local L, W, cap, full, M = q[2], q[3], q[4], q[6], q[5]
    level, last = leak(q, level, last)
    local allowed, retry, reason, delay, remaining = 0, 0, 0, 0, 0
    if q[1] == 6 then
      local d = cdiv(level, L)
      if c > cap then
        retry, reason = -1, 2
      elseif level <= full - c * W and d <= M then
        level = level + c * W
        allowed, delay = 1, d
      else
        reason = 1
        if level <= full - c * W then reason = 3 end
        retry = cdiv(level - min(full - c * W, M * L), L) -- M*L <= 8.64e15
      end
      local t1 = min(full - W, M * L)
      if level <= t1 then remaining = floor((t1 - level) / W) + 1 end
    else
      if c > cap then
        retry, reason = -1, 2
      elseif level <= full - c * W then -- level + c*W <= full, kept below 2^53
        level = level + c * W
        allowed = 1
      else
        retry, reason = cdiv(level - (full - c * W), L), 1
      end
      remaining = floor((full - level) / W)
    end
    return allowed, remaining, cdiv(level, L), retry, delay, reason, last, level, level, last
  end
  transition[5], transition[6] = leakyBucket, leakyBucket
end

if uses[2] then
  -- A SlidingWindowLog list holds sum, T1, c1, T2, c2, ...: the sum of the c's, then the units
  -- c admitted at each instant T, oldest first. The call sees a log as a table over the list:
  --   t      the instant every take of the call on the log is decided at: now, or the newest
  --          entry's instant if the clock went back (the same for each take, since an entry
  --          the call adds is at t)
  --   len2   the list's entry elements (its length - 1), drop how many of them lie before the
  --          window (T <= t - W) and are dropped
  --   sum    the units of the live entries; lastT, lastC the list's newest entry, lastC as
  --          this call changed it, origC as in the list
  --   pushT, pushC the one entry the call adds, pushT false when none
  -- so that a decision reads the list and a commit writes it once. That table is the log's
  -- one state value; a take returns a new one.

  -- loadLog reads the log at key as the call sees it before its first take, the expired
  -- entries counted in drop (what limiter.SlidingWindowLogState.take drops first).
  loadLog = function(key, W)
    local st = {t = now, len2 = 0, drop = 0, sum = 0, lastT = 0, lastC = 0, origC = 0, pushT = false, pushC = 0}
    local len = call('LLEN', key)
    if len == 0 then return st end
    st.len2 = len - 1
    st.sum = tonumber(call('LINDEX', key, 0))
    local tail = call('LRANGE', key, -2, -1)
    st.lastT, st.lastC = tonumber(tail[1]), tonumber(tail[2])
    st.origC = st.lastC
    if now < st.lastT then st.t = st.lastT end -- clock went back
    local cutoff, drop, sum = st.t - W, 0, st.sum
    while drop < st.len2 do -- 32 entries at a time
      local chunk = call('LRANGE', key, 1 + drop, drop + 64)
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
  newestT = function(st)
    if st.pushT then return st.pushT end
    if st.len2 > st.drop then return st.lastT end
    return nil
  end

  -- copyLog is a new state value equal to st; addLog adds c units at st.t, to the newest
  -- entry when it is at st.t.
  copyLog = function(st)
    local s = {}
    for k, v in pairs(st) do s[k] = v end
    return s
  end
  addLog = function(s, c)
    if newestT(s) == s.t then
      if s.pushT then s.pushC = s.pushC + c else s.lastC = s.lastC + c end
    else
      s.pushT, s.pushC = s.t, c
    end
    s.sum = s.sum + c
  end

  -- limiter.SlidingWindowLogState.take (its drop already counted by loadLog)
  transition[2] = function(q, c, st, _, _, key)
    local L, W, t = q[2], q[3], st.t
    local s = copyLog(st)
    local allowed, retry, reason = 0, 0, 0
    if c > L then
      retry, reason = -1, 2
    elseif s.sum + c <= L then
      allowed = 1
      addLog(s, c)
    else
      reason = 1
      -- the first entry, oldest first, at which the running total reaches sum + c - L; it is
      -- reached within the log because c <= L
      local need = s.sum + c - L
      local from = 1 + s.drop -- element index of the oldest live entry's T
      while retry == 0 and from < s.len2 do
        local chunk = call('LRANGE', key, from, min(from + 63, s.len2))
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
    return allowed, max(0, L - s.sum), reset, retry, 0, reason, t, 0, s
  end

  -- saveLog writes the log's changes: trims the dropped entries, updates the newest entry's
  -- units, appends the new entry, writes the sum, and sets the TTL (or lets an emptied list
  -- go).
  saveLog = function(key, st, W)
    local changed = st.drop > 0 or st.pushT or st.lastC ~= st.origC
    if not changed and minTTL == 0 then return end -- with server time its TTL is still right
    local slot = st.len2 > 0 -- element 0 is the sum
    if st.drop > 0 then
      call('LTRIM', key, 1 + st.drop, -1) -- trims the sum too; an emptied list is deleted
      slot = false
    end
    if st.len2 > st.drop and st.lastC ~= st.origC then call('LSET', key, -1, st.lastC) end
    if st.pushT then call('RPUSH', key, st.pushT, st.pushC) end
    local nt = newestT(st)
    if nt then
      if slot then
        call('LSET', key, 0, st.sum)
      else
        call('LPUSH', key, st.sum)
      end
      call('PEXPIRE', key, max(nt + W - st.t, minTTL))
    end
  end
end

if uses[8] then
  -- Concurrency (limiter.ConcurrencyState.take): a ZSET of holdings, each member
  -- '<holder id>:<holding>' scored by the instant it expires (ms). The state s1 is the number
  -- held once the expired ones are dropped (loadSlots), s2 the holdings this call adds, a list
  -- {holding, rest} newest first or false, never changed in place, so that restoring a denied
  -- group's saved s2 drops its adds. c is the holding's number (its cost is always 1). A
  -- denial's retryAfter is limiter.ConcurrencyRetryAfter.
  transition[8] = function(q, c, held, adds)
    local L = q[2]
    if held + 1 <= L then
      return 1, L - held - 1, 0, 0, 0, 0, now, 0, held + 1, {c, adds}
    end
    return 0, max(0, L - held), 0, 1000, 0, 1, now, 0, held, adds
  end
end

if floor(kinds / 4) % 2 == 1 then
  -- The late charges (limiter's charge methods): the state brought forward as the take does,
  -- then the units charged whether or not they fit: a window's count up to L, a bucket's
  -- tokens down to limiter.MaxDebt.
  lateCharge = function(q, c, s1, s2, s3)
    local alg, L = q[1], q[2]
    if alg == 4 then
      local W, full = q[3], q[6]
      local tokens, last = refill(q, s1, s2)
      local debtFloor = full - 9007199254740991 -- limiter.MaxDebt
      if c > floor((tokens - debtFloor) / W) then -- tokens - debtFloor <= 2^53 - 1
        tokens = debtFloor
      else
        tokens = tokens - c * W -- c*W <= tokens - debtFloor
      end
      return 1, max(0, floor(tokens / W)), cdiv(full - tokens, L), 0, 0, 0, last, tokens, tokens, last
    end
    local reset = 0
    if alg == 7 then
      local t, st, en, n = rollCalendar(q, s1, s2, s3)
      n = min(L, n + min(c, L))
      if n > 0 then reset = max(1, en - t) end
      return 1, L - n, reset, 0, 0, 0, t, 0, st, en, n
    end
    local W = q[3]
    local t, win, n = rollFixed(W, s1, s2)
    n = min(L, n + min(c, L))
    if n > 0 then reset = (win + 1) * W - t end
    return 1, L - n, reset, 0, 0, 0, t, 0, win, n
  end
end

if floor(kinds / 32) % 2 == 1 then
  -- Leases (limiter.MemoryStore.Issue): a lease of k units issues as many as k takes of cost
  -- 1 at this instant would: min(k, cap) if they fit as one take, else the Remaining of its
  -- denial (each transition's Remaining is the most that fit), charged as one take; none when
  -- none fit, and then the result is a take of one unit's. Its delay (0 for every leasable
  -- algorithm) is the number of units issued. The second decision starts again from the state
  -- the call had.
  lease = function(q, k, s1, s2, s3, key)
    local decide, c = transition[q[1]], min(k, q[4])
    local a, rm, rs, rt, dl, rn, at, ct, n1, n2, n3 = decide(q, c, s1, s2, s3, key)
    if a == 0 and rn == 1 and rm > 0 then
      c = min(c, rm)
      a, rm, rs, rt, dl, rn, at, ct, n1, n2, n3 = decide(q, c, s1, s2, s3, key)
    end
    if a == 0 and c > 1 then -- none fit: the denial of one unit, what a request of 1 gets
      c = 1
      a, rm, rs, rt, dl, rn, at, ct, n1, n2, n3 = decide(q, c, s1, s2, s3, key)
    end
    dl = 0
    if a == 1 then dl = c end
    return a, rm, rs, rt, dl, rn, at, ct, n1, n2, n3
  end
end

if floor(kinds / 64) % 2 == 1 then
  -- Usage decided elsewhere (Store.AddUsage: what a sidecar admitted on its local share while
  -- Redis was away), added without deciding anything: the state brought forward as a take
  -- brings it, then as much of c charged as it can hold and stay within the bounds that keep
  -- the arithmetic exact (a window's or a log's count up to L, a token bucket down to empty, a
  -- leaky bucket up to full). Its delay is the units charged; its remaining is a take of one
  -- unit's but for the queue, whose delay bound it does not count.
  usage = function(q, c, s1, s2, s3)
    local alg, L, W = q[1], q[2], q[3]
    local add, reset = 0, 0
    if alg == 4 then
      local tokens, last = refill(q, s1, s2)
      if tokens >= W then add = min(c, floor(tokens / W)) end -- tokens < 0 is a debt
      tokens = tokens - add * W
      local remaining = 0
      if tokens >= W then remaining = floor(tokens / W) end
      return 1, remaining, cdiv(q[6] - tokens, L), 0, add, 0, last, tokens, tokens, last
    elseif alg == 5 or alg == 6 then
      local level, last = leak(q, s1, s2)
      add = min(c, floor((q[6] - level) / W))
      level = level + add * W
      return 1, floor((q[6] - level) / W), cdiv(level, L), 0, add, 0, last, level, level, last
    elseif alg == 2 then
      local s = copyLog(s1)
      add = max(0, min(c, L - s.sum))
      if add > 0 then addLog(s, add) end
      local nt = newestT(s)
      if nt then reset = nt + W - s.t end
      return 1, max(0, L - s.sum), reset, 0, add, 0, s.t, 0, s
    elseif alg == 3 then
      local t, win, pr, n = rollCounter(W, s1, s2, s3)
      add = max(0, min(c, L - n))
      n = n + add
      local rest = W - 1 - (t - win * W)
      if n > 0 then
        reset = rest + W
      elseif pr > 0 then
        reset = rest
      end
      return 1, max(0, L - n - cdiv(pr * rest, W)), reset, 0, add, 0, t, 0, win, pr, n
    elseif alg == 7 then
      local t, st, en, n = rollCalendar(q, s1, s2, s3)
      add = max(0, min(c, L - n))
      n = n + add
      if n > 0 then reset = max(1, en - t) end
      return 1, max(0, L - n), reset, 0, add, 0, t, 0, st, en, n
    end
    local t, win, n = rollFixed(W, s1, s2)
    add = max(0, min(c, L - n))
    n = n + add
    if n > 0 then reset = (win + 1) * W - t end
    return 1, max(0, L - n), reset, 0, add, 0, t, 0, win, n
  end
end

-- keys holds KEYS[k] as the takes so far left it, loaded at its first take, in the 6 slots
-- from b = 6*(k-1): b+1 its limit q (nil until loaded), b+2, b+3, b+4 the state s1, s2, s3
-- (false for none), b+5 raw (the string state read, false for none), b+6 reset (of its last
-- take, false while it has none to write); and saved, in the same slots, what a request
-- that touched it may have to restore: b+1 the request's number, b+2 .. b+6 the state, raw
-- and reset before it. One table for every key, not one per key. The string states: the windows' are integers in decimal, separated by
-- spaces ("%d" formats integers below 2^53 exactly): fw "<window> <count>", swc "<window>
-- <prev> <curr>", calendar "<start> <end> <count>", the shortest for their usually small
-- numbers. The buckets' (tb <tokens, last>, lbm and lbq <level, last>) are packBucket's 12
-- bytes (arith.lua), shorter than their decimal digits.
local keys = {}

local out, n = {}, 0
-- The request group being decided (its number, whether it is still admitted) and the keys it
-- touched (their slot bases), to restore if it is not.
local gid, admit, nt, touched, saved = 1, true, 0, nil, nil
local i = 4 + 5 * nl
local v = N[i]
while v do
  local f = v % 128
  local k, l, c
  if f >= 64 then
    f = f - 64
    k, l, c = N[i + 1], N[i + 2], N[i + 3]
    i = i + 4
  else
    v = (v - f) / 128
    k = v % 512
    v = (v - k) / 512
    l = v % 512
    c = (v - l) / 512
    k, l = k + 1, l + 1
    i = i + 1
  end
  v = N[i]
  local reps = 1
  if v and v < 0 then
    reps = 1 - v
    i = i + 1
    v = N[i]
  end

  local q, key, b = limits[l], KEYS[k], 6 * k - 6
  local alg = q[1]
  local s1, s2, s3 = false, false, false
  if keys[b + 1] then
    s1, s2, s3 = keys[b + 2], keys[b + 3], keys[b + 4]
  else
    local raw = false
    if alg == 2 then
      s1 = loadLog(key, q[3])
    elseif alg == 8 then -- loadSlots: the holdings that have not expired
      call('ZREMRANGEBYSCORE', key, '-inf', now)
      s1 = call('ZCARD', key)
    else
      raw = call('GET', key)
      if not raw then -- absent
      elseif alg >= 4 and alg <= 6 then
        s1, s2 = unpackBucket(raw)
      elseif alg == 1 then
        local x, y = string.match(raw, '^(%d+) (%d+)$')
        s1, s2 = tonumber(x), tonumber(y)
      else
        local x, y, z = string.match(raw, '^(%d+) (%d+) (%d+)$')
        s1, s2, s3 = tonumber(x), tonumber(y), tonumber(z)
      end
    end
    keys[b + 1], keys[b + 2], keys[b + 3], keys[b + 4], keys[b + 5], keys[b + 6] = q, s1, s2, s3, raw, false
  end
  local kind, alone, st = f % 8, f >= 32, f % 16 >= 8
  if not alone then
    saved = saved or {}
    if saved[b + 1] ~= gid then
      saved[b + 1], saved[b + 2], saved[b + 3], saved[b + 4], saved[b + 5], saved[b + 6] = gid, s1, s2, s3, keys[b + 5], keys[b + 6]
      touched = touched or {}
      nt = nt + 1
      touched[nt] = b
    end
  end

  local decide = transition[alg]
  local a, rm, rs, rt, dl, rn, at, ct
  local rep = 1
  while rep <= reps do
    local p1, p2, p3, from = s1, s2, s3, n
    if kind <= 1 then
      a, rm, rs, rt, dl, rn, at, ct, s1, s2, s3 = decide(q, c, s1, s2, s3, key)
    elseif kind == 5 then
      a, rm, rs, rt, dl, rn, at, ct, s1, s2, s3 = lease(q, c, s1, s2, s3, key)
    elseif kind == 2 then
      a, rm, rs, rt, dl, rn, at, ct, s1, s2, s3 = lateCharge(q, c, s1, s2, s3)
    elseif kind == 6 then
      a, rm, rs, rt, dl, rn, at, ct, s1, s2, s3 = usage(q, c, s1, s2, s3)
    else -- a check changes nothing
      a, rm, rs, rt, dl, rn, at, ct = decide(q, c, s1, s2, s3, key)
    end
    local x = rt
    if a == 1 then x = dl end
    local r1 = a + 8 * rn + 64 * rm
    if x ~= 0 then r1 = r1 + 2 end
    if st then r1 = r1 + 4 end
    n = n + 1
    if rs < 1048576 then -- 2^20
      out[n] = r1 + 8589934592 * rs -- 2^33; < 2^53
    else
      out[n], out[n + 1] = r1 + 32, rs
      n = n + 1
    end
    if x ~= 0 then
      n = n + 1
      out[n] = x
    end
    if st then
      out[n + 1], out[n + 2] = at, ct
      n = n + 2
    end
    rep = rep + 1
    if rep == 2 and a == 1 and reps > 3 and kind == 0 and not st and alg ~= 2 and alg ~= 6 and alg ~= 8 then
      -- An admitted Take repeated: of the repeats, as many are admitted as one take of their
      -- summed cost would admit (for each algorithm but the log and the queue, j takes of c at
      -- one instant are admitted together exactly when one take of j*c is, which then leaves
      -- the same state), so k, the most of them admitted, is found by bisection (the
      -- transitions change nothing), charged as one take, and replied as -k, then the instant
      -- and state the first take left: request.go's decoder replays the k takes on that state
      -- with package limiter's transitions. The repeats after them are decided below.
      local lo, hi = 0, reps - 1
      while lo < hi do
        local mid = lo + floor((hi - lo + 1) / 2)
        if decide(q, mid * c, s1, s2, s3, key) == 1 then lo = mid else hi = mid - 1 end
      end
      if lo > 0 then
        out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = -lo, at, s1, s2, s3 or 0
        n = n + 5
        a, rm, rs, rt, dl, rn, at, ct, s1, s2, s3 = decide(q, lo * c, s1, s2, s3, key)
        rep = rep + lo
        p1, p2, p3 = false, false, false -- not a repeat of a denial
      end
    end
    if rep <= reps and s1 == p1 and s2 == p2 and s3 == p3 then
      -- The take left the state as it was (a denial): each repeat of it is decided on the
      -- same state at the same instant, so it gets the same reply.
      local w = n - from
      for _ = rep, reps do
        for j = from + 1, from + w do
          out[n + j - from] = out[j]
        end
        n = n + w
      end
      rep = reps + 1
    end
  end
  if kind == 3 or kind == 4 then
    if a == 0 and kind == 3 then admit = false end
  else
    keys[b + 2], keys[b + 3], keys[b + 4], keys[b + 6] = s1, s2 or false, s3 or false, rs
    if a == 0 and kind == 0 and not alone then admit = false end
  end
  if not alone and f % 32 >= 16 then -- the request's last take
    if not admit then
      for j = 1, nt do
        local t = touched[j]
        keys[t + 2], keys[t + 3], keys[t + 4], keys[t + 6] = saved[t + 2], saved[t + 3], saved[t + 4], saved[t + 6]
      end
    end
    gid, admit, nt = gid + 1, true, 0
  end
end

-- Each key's state written once, with a TTL of at least its reset, or a state equivalent to
-- an absent key (reset == 0) deleted.
--  - With explicit time (minTTL > 0) a key that exists is kept, like limiter.MemoryStore keeps
--    its entry, and a new one is only written when reset > 0, like MemoryStore: the two then
--    see the same state even when instants go backwards. Every write renews the TTL, since the
--    caller's instants say nothing about Redis's clock.
--  - With server time an unchanged state is not written again: its TTL, set when it was
--    written, already ends when it becomes equivalent to an absent key.
for k = 1, #KEYS do
  local b = 6 * k - 6
  local q, reset = keys[b + 1], keys[b + 6]
  if q and q[1] == 8 then
    -- The holdings added, each expiring W after now, and the key with the last of them (no
    -- holding it keeps expires later).
    local adds = keys[b + 3]
    if adds then
      local key, W, id = KEYS[k], q[3], q[5]
      while adds do
        call('ZADD', key, now + W, string.format('%d:%d', id, adds[1]))
        adds = adds[2]
      end
      call('PEXPIRE', key, max(W, minTTL))
    end
  elseif reset then
    local alg, key, raw, s1 = q[1], KEYS[k], keys[b + 5], keys[b + 2]
    if alg == 2 then
      saveLog(key, s1, q[3])
    elseif reset > 0 or (raw and minTTL > 0) then
      local state
      if alg >= 4 and alg <= 6 then
        state = packBucket(s1, keys[b + 3])
      elseif alg == 1 then
        state = string.format('%d %d', s1, keys[b + 3])
      else
        state = string.format('%d %d %d', s1, keys[b + 3], keys[b + 4])
      end
      if minTTL > 0 or state ~= raw then
        call('SET', key, state, 'PX', max(reset, minTTL))
      end
    elseif raw then
      call('DEL', key)
    end
  end
end
return out
