package limiter

// FixedWindowState is one key's FixedWindow state. Windows are aligned to the Unix epoch:
// window w covers [w*W, (w+1)*W). The zero value is a key that has seen nothing.
//
// A burst at the end of one window and another at the start of the next can admit 2*L units
// within a few milliseconds: the algorithm bounds each aligned window, not every interval of
// length W.
type FixedWindowState struct {
	// Window is the index w = floor(t/W) of the latest window a request fell in.
	Window int64
	// Count is the number of units admitted in Window.
	Count int64
}

// Take decides a request of cost c at now under lim (Algorithm FixedWindow) and updates s.
// lim must be valid and c >= 1; Take does not check.
//
//	w = floor(now/W)
//	if w > Window: Window = w, Count = 0
//	if w < Window: now = Window*W            (clock went back: count it in the latest window)
//	end = (Window+1)*W - now                 (ms to the end of the window)
//	c > L:               deny, cost exceeds capacity, RetryAfter = NeverRetry
//	Count + c <= L:      admit, Count += c
//	otherwise:           deny, limited, RetryAfter = end
//	Remaining  = max(0, L - Count)
//	ResetAfter = end if Count > 0, else 0
func (s *FixedWindowState) Take(lim Limit, c, now int64) Result { return s.take(&lim, c, now) }

// take is Take with lim by reference, for the store's hot path.
func (s *FixedWindowState) take(lim *Limit, c, now int64) Result {
	L, end := lim.Limit, s.roll(lim.WindowMs(), now)
	// The decision is written out here and in CalendarWindowState.take, not shared: a call
	// of its own (too large to inline) costs the memory store's hot path about 15 %.
	var r Result
	switch {
	case c > L:
		r = costExceedsCapacity(L)
	case s.Count+c <= L:
		s.Count += c
		r = Result{Allowed: true, Limit: L}
	default:
		r = Result{Limit: L, RetryAfter: ms(end), Reason: ReasonLimited}
	}
	r.Remaining = max(0, L-s.Count)
	if s.Count > 0 {
		r.ResetAfter = ms(end)
	}
	return r
}

// roll brings s forward to now (a window of W ms) and returns the ms to the end of its window,
// from now or, when the clock went back, from the start of the latest window.
func (s *FixedWindowState) roll(W, now int64) int64 {
	w := now / W
	if w > s.Window {
		s.Window, s.Count = w, 0
	} else if w < s.Window {
		now = s.Window * W
	}
	return (s.Window+1)*W - now
}
