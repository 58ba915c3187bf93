-- Shared by the per-algorithm scripts (prepended by scripts.go, after arith.lua).
--
-- KEYS: the limiter's keys, all with one hash tag (one cluster slot).
-- ARGV[1] now: ms since the Unix epoch, or '' to read Redis's clock
-- ARGV[2] L, ARGV[3] W (window, ms), ARGV[4] cap (Limit.Capacity), ARGV[5] c (cost, 1..)
-- ARGV[6] minTTL: the least TTL to set, ms (0 with server time)
-- ARGV[7] M: LeakyBucket Queue's MaxDelay, ms; ARGV[8] mode: q for LeakyBucket Queue, else m
-- Returns {allowed 0/1, remaining, resetAfter ms, retryAfter ms (-1: never), delay ms, reason},
-- reason 0 = none, 1 = limited, 2 = cost exceeds capacity, 3 = delay exceeds max delay.
--
-- Numbers are doubles. Validate's bounds keep every value below 2^53 (the largest are
-- cap*W, L*W and M*L, each <= 1e8 * 8.64e7 = 8.64e15, and instants <= 2^52 + 2*W), so all of
-- it is exact integer arithmetic: +, -, * and comparisons of such integers are exact, and
-- math.floor(a / b) is floor division for 0 <= a <= 2^53, b >= 1 (the rounded quotient cannot
-- reach the next integer). redis.call formats numbers with "%.17g", exact for these integers;
-- values read back go through tonumber.
local now
if ARGV[1] == '' then
  -- TIME is non-deterministic, so the script must be replicated by its effects: the default
  -- since Redis 5 and the only mode since 7 (hence Redis >= 5).
  local t = redis.call('TIME')
  -- seconds * 1000 is about 1.8e12 < 2^53; t[2] is microseconds
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local L = tonumber(ARGV[2])
local W = tonumber(ARGV[3])
local cap = tonumber(ARGV[4])
local c = tonumber(ARGV[5])
local minTTL = tonumber(ARGV[6])
local M = tonumber(ARGV[7])

-- The window and bucket algorithms keep their state in one string key, integers separated by
-- spaces ("%d" formats integers below 2^53 exactly; tostring would round them to 14 digits), so
-- that a read is one GET and a write one SET with its TTL.

-- load returns KEYS[1]'s fields as numbers, or nothing for an absent key, and the raw value.
local function load()
  local raw = redis.call('GET', KEYS[1])
  if not raw then return false, nil end
  local f = {}
  for x in string.gmatch(raw, '%-?%d+') do f[#f + 1] = tonumber(x) end
  return raw, f
end

-- save writes state (a string) to KEYS[1] with a TTL of at least reset ms, or deletes the key
-- when the state is equivalent to an absent one (reset == 0).
--  - With explicit time (minTTL > 0) a key that exists is kept, like limiter.MemoryStore keeps
--    its entry, and a new one is only written when reset > 0, like MemoryStore: the two then
--    see the same state even when instants go backwards. Every write renews the TTL, since the
--    caller's instants say nothing about Redis's clock.
--  - With server time an unchanged state is not written again: its TTL, set when it was
--    written, already ends when it becomes equivalent to an absent key.
local function save(raw, reset, state)
  if minTTL > 0 then
    if reset > 0 or raw then
      redis.call('SET', KEYS[1], state, 'PX', math.max(reset, minTTL))
    end
  elseif reset > 0 then
    if state ~= raw then
      redis.call('SET', KEYS[1], state, 'PX', reset)
    end
  elseif raw then
    redis.call('DEL', KEYS[1])
  end
end
