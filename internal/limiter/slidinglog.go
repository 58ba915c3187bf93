package limiter

// LogEntry is one instant's admitted units in a SlidingWindowLogState.
type LogEntry struct {
	// T is the instant, in ms since the Unix epoch.
	T int64
	// Cost is the number of units admitted at T.
	Cost int64
}

// SlidingWindowLogState is one key's SlidingWindowLog state: the log of admitted units still
// inside the window, oldest first, at most one entry per instant (denied requests leave no
// entry). The zero value is an empty log. A state holds at most Limit entries; it reuses its
// buffer, so a key's steady state does not allocate.
//
// The log enforces the limit exactly: at most L units are admitted in any interval (t-W, t].
type SlidingWindowLogState struct {
	ring []LogEntry // ring buffer; entries ring[head], ring[head+1], ... (mod len), n of them
	head int
	n    int
	sum  int64 // total Cost of the n entries
}

// Entries returns a copy of the log, oldest first.
func (s *SlidingWindowLogState) Entries() []LogEntry {
	out := make([]LogEntry, s.n)
	for i := range out {
		out[i] = *s.at(i)
	}
	return out
}

// Sum is the number of units in the log.
func (s *SlidingWindowLogState) Sum() int64 { return s.sum }

func (s *SlidingWindowLogState) at(i int) *LogEntry {
	j := s.head + i
	if j >= len(s.ring) {
		j -= len(s.ring)
	}
	return &s.ring[j]
}

func (s *SlidingWindowLogState) push(e LogEntry) {
	if s.n == len(s.ring) {
		grown := make([]LogEntry, max(4, 2*len(s.ring)))
		for i := 0; i < s.n; i++ {
			grown[i] = *s.at(i)
		}
		s.ring, s.head = grown, 0
	}
	*s.at(s.n) = e
	s.n++
	s.sum += e.Cost
}

// Take decides a request of cost c at now under lim (Algorithm SlidingWindowLog) and updates s.
// lim must be valid and c >= 1; Take does not check.
//
//	if log not empty and now < newest.T: now = newest.T    (clock went back)
//	drop every entry with T <= now - W                     (alive iff T > now - W)
//	sum = total Cost of the entries left
//	c > L:          deny, cost exceeds capacity, RetryAfter = NeverRetry
//	sum + c <= L:   admit; if newest.T == now: newest.Cost += c, else append (now, c)
//	otherwise:      deny, limited; walking the entries oldest first, RetryAfter = e.T + W - now
//	                for the first entry e at which the running total of Cost reaches
//	                sum + c - L (once e has expired, c fits)
//	Remaining  = max(0, L - sum)                           (sum after an admission)
//	ResetAfter = newest.T + W - now if the log is not empty, else 0
func (s *SlidingWindowLogState) Take(lim Limit, c, now int64) Result { return s.take(&lim, c, now) }

// take is Take with lim by reference, for the store's hot path.
func (s *SlidingWindowLogState) take(lim *Limit, c, now int64) Result {
	W, L := lim.WindowMs(), lim.Limit
	if s.n > 0 {
		now = max(now, s.at(s.n-1).T)
	}
	for s.n > 0 && s.ring[s.head].T <= now-W {
		s.sum -= s.ring[s.head].Cost
		s.head++
		if s.head == len(s.ring) {
			s.head = 0
		}
		s.n--
	}
	if s.n == 0 {
		s.head = 0
	}

	var r Result
	switch {
	case c > L:
		r = costExceedsCapacity(L)
	case s.sum+c <= L:
		if s.n > 0 && s.at(s.n-1).T == now {
			s.at(s.n - 1).Cost += c
			s.sum += c
		} else {
			s.push(LogEntry{T: now, Cost: c})
		}
		r = Result{Allowed: true, Limit: L}
	default:
		r = Result{Limit: L, Reason: ReasonLimited}
		need := s.sum + c - L
		for i := 0; i < s.n; i++ {
			e := s.at(i)
			if need -= e.Cost; need <= 0 {
				r.RetryAfter = ms(e.T + W - now)
				break
			}
		}
	}
	r.Remaining = max(0, L-s.sum)
	if s.n > 0 {
		r.ResetAfter = ms(s.at(s.n-1).T + W - now)
	}
	return r
}
