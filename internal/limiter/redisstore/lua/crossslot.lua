#!lua flags=allow-cross-slot-keys
-- Prepended (by cluster.go) to the request script for the calls a Redis Cluster batcher sends
-- to its master: one call may then decide keys of many slots, all served by that master.
--
-- Redis refuses a command whose declared keys hash to different slots (CROSSSLOT), whatever
-- the script's flags; the allow-cross-slot-keys flag lets a script reach keys of several slots
-- that it did not declare. So such a call declares no keys (numkeys 0) and ends its ARGV with
-- the keys and their count: ARGV = {request ARGV..., KEYS[1], ..., KEYS[n], n}. This moves
-- them to KEYS, as if they had been declared, and drops them from ARGV; the request script
-- then runs unchanged. Redis still checks every key at each command: one not served by this
-- node fails the call at its first read, before the script writes anything (request.lua
-- reads each state first and writes them all at the end).
do
  local na = #ARGV
  local nk = tonumber(ARGV[na])
  local first = na - nk
  for j = 1, nk do KEYS[j] = ARGV[first - 1 + j] end
  for j = na, first, -1 do ARGV[j] = nil end
end
