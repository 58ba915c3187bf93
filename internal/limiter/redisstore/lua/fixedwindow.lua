-- FixedWindow: limiter.FixedWindowState.Take. KEYS[1]: "<window index> <count>".
local raw, st = load()
local win, n = 0, 0
if raw then win, n = st[1], st[2] end

local w = fdiv(now, W)
if w > win then
  win = w
  n = 0
elseif w < win then
  now = win * W -- clock went back: count it in the latest window
end
local e = (win + 1) * W - now -- ms to the end of the window; (win+1)*W <= now + W < 2^53

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
save(raw, reset, string.format('%d %d', win, n))
return {allowed, math.max(0, L - n), reset, retry, 0, reason}
