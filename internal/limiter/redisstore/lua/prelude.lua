-- Shared by every script (prepended by scripts.go).
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
  -- TIME is non-deterministic: the script must be replicated by its effects, the only mode
  -- since Redis 7 and the default since 5; replicate_commands switches 3.2 and 4 to it.
  if redis.replicate_commands then redis.replicate_commands() end
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

-- fdiv is a / b and cdiv is ceil(a/b) (limiter's ceilDiv), for integers 0 <= a < 2^53, b > 0.
local function fdiv(a, b)
  return math.floor(a / b)
end
local function cdiv(a, b)
  local q = math.floor(a / b)
  if q * b ~= a then q = q + 1 end
  return q
end

-- save writes the hash state in KEYS[1] with a TTL of at least reset ms, or deletes it when it
-- is equivalent to an absent key (reset == 0). With explicit time (minTTL > 0) a key that
-- exists is kept like limiter.MemoryStore keeps its entry, and a new one is only written when
-- reset > 0, like MemoryStore, so the two see the same state even when instants go backwards.
local function save(existed, reset, ...)
  if reset > 0 or (existed and minTTL > 0) then
    redis.call('HSET', KEYS[1], ...)
    redis.call('PEXPIRE', KEYS[1], math.max(reset, minTTL))
  elseif existed then
    redis.call('DEL', KEYS[1])
  end
end
