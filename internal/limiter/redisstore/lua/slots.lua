-- Concurrency holdings (see request.lua's concurrency): renewal of the holdings a sidecar
-- still holds (prepended by scripts.go with arith.lua).
--
-- KEYS[1]: the Concurrency key. ARGV[1] now (ms) or '' for Redis's clock, ARGV[2] W (ms, how
-- long a holding lasts), ARGV[3] minTTL (ms), ARGV[4] '1' to adopt, else '0', ARGV[5..] the
-- members.
-- Renewal: each member still held (not expired, not released) is made to expire W after now;
-- a member that is gone is not added back, so a holding that expired while its holder was cut
-- off stays freed. Adoption: each member is held, expiring W after now, whether or not it
-- fits (holdings a sidecar took on its local share while Redis could not decide). Returns
-- the number renewed (or added).
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local key, W = KEYS[1], tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local renewed, mode = 0, 'XX'
if ARGV[4] == '1' then mode = 'CH' end
for i = 5, #ARGV do
  if mode == 'XX' then
    renewed = renewed + redis.call('ZADD', key, 'XX', 'CH', now + W, ARGV[i])
  else
    renewed = renewed + redis.call('ZADD', key, 'CH', now + W, ARGV[i])
  end
end
if renewed > 0 then redis.call('PEXPIRE', key, max(W, tonumber(ARGV[3]))) end
return renewed
