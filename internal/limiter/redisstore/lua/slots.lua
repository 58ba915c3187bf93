-- Concurrency holdings (see request.lua's concurrency): renewal of the holdings a sidecar
-- still holds (prepended by scripts.go with arith.lua).
--
-- KEYS[1]: the Concurrency key. ARGV[1] now (ms) or '' for Redis's clock, ARGV[2] W (ms, how
-- long a holding lasts), ARGV[3] minTTL (ms), ARGV[4..] the members.
-- Each member is held, expiring W after now, whether Redis still had it or not, and whether or
-- not it fits: the holder's requests still run, so a holding Redis lost (it expired while its
-- holder was cut off, Redis restarted empty) or never had (taken on a local share while Redis
-- could not decide) counts again until released. Returns the number Redis did not hold.
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local key, W = KEYS[1], tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local added = 0
for i = 4, #ARGV do
  added = added + redis.call('ZADD', key, now + W, ARGV[i])
end
redis.call('PEXPIRE', key, max(W, tonumber(ARGV[3])))
return added
