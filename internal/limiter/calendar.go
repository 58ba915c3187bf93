package limiter

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// Period is the length of a calendar window: a day, an ISO week (from Monday) or a month,
// each beginning at local midnight of a time zone. The empty Period is not a calendar: the
// window is Limit.Window, aligned to the Unix epoch.
type Period string

// The calendar periods of the RateLimitPolicy API.
const (
	Day   Period = "Day"
	Week  Period = "Week"
	Month Period = "Month"
)

// Nominal is the period's longest length, what Limit.Window holds for a calendar limit: it
// names the period where a single duration is needed (the RateLimit-Policy field's w, plots)
// and keys the state; the decisions use the real boundaries (CalendarBounds). Zero for "".
func (p Period) Nominal() time.Duration {
	switch p {
	case Day:
		return 25 * time.Hour // the day DST ends
	case Week:
		return 7*24*time.Hour + time.Hour
	case Month:
		return 31*24*time.Hour + time.Hour
	}
	return 0
}

// Per names what the limit counts per, for messages: "1m0s", or "month in Europe/Berlin".
func (l Limit) Per() string {
	if l.Period == "" {
		return l.Window.String()
	}
	zone := "UTC"
	if l.Zone != nil {
		zone = l.Zone.String()
	}
	return strings.ToLower(string(l.Period)) + " in " + zone
}

var zones sync.Map // name -> *time.Location

// LoadZone returns the IANA time zone name ("" is UTC), loaded once per process, so that
// every Limit of a zone holds the same *time.Location and compares equal across reloads.
func LoadZone(name string) (*time.Location, error) {
	if name == "" {
		name = "UTC"
	}
	if z, ok := zones.Load(name); ok {
		return z.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("time zone %q is not an IANA time zone this binary knows: %w", name, err)
	}
	if name == "Local" {
		return nil, fmt.Errorf("time zone %q depends on the machine; name an IANA zone such as Europe/Berlin", name)
	}
	z, _ := zones.LoadOrStore(name, loc)
	return z.(*time.Location), nil
}

// CalendarBounds returns the calendar window of a calendar Limit (Period set) that holds the
// instant nowMs (ms since the Unix epoch): its start and end, in ms, start <= nowMs < end.
// A window begins at local midnight in l.Zone, so a month has its real length and a day with a
// DST change has 23 or 25 hours. Where a zone skips its midnight, the window begins at the
// first instant of that local day. The stores call it with the caller's now, so that the Lua
// scripts never need a time-zone database.
func (l *Limit) CalendarBounds(nowMs int64) (start, end int64) {
	t := time.UnixMilli(nowMs).In(l.Zone)
	y, m, d := t.Date()
	switch l.Period {
	case Day:
		start, end = midnight(y, m, d, l.Zone), midnight(y, m, d+1, l.Zone)
	case Week:
		d -= (int(t.Weekday()) + 6) % 7 // back to Monday
		start, end = midnight(y, m, d, l.Zone), midnight(y, m, d+7, l.Zone)
	default: // Month; Validate admits nothing else
		start, end = midnight(y, m, 1, l.Zone), midnight(y, m+1, 1, l.Zone)
	}
	// A zone whose midnight falls in a DST gap can map it past the instant; the instant
	// then belongs to that day anyway (time.Date normalizes day overflow).
	start = min(start, nowMs)
	end = max(end, nowMs+1)
	return start, end
}

// midnight is the first instant of the local day y-m-d in loc, in ms since the epoch.
func midnight(y int, m time.Month, d int, loc *time.Location) int64 {
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	if h := t.Hour(); h != 0 && t.Day() != time.Date(y, m, d, 12, 0, 0, 0, loc).Day() {
		// midnight fell into a gap and was moved to the previous day: take 1 a.m. instead
		t = time.Date(y, m, d, 1, 0, 0, 0, loc)
	}
	return t.UnixMilli()
}

// CalendarWindowState is one key's state under a calendar FixedWindow (Limit.Period set): the
// window it counts in, as instants, and the units admitted in it. The zero value is a key that
// has seen nothing.
type CalendarWindowState struct {
	// Start and End bound the latest window a request fell in, ms since the epoch.
	Start, End int64
	// Count is the number of units admitted in that window.
	Count int64
}

// Take decides a request of cost c at now under lim (a calendar FixedWindow) and updates s.
// lim must be valid and c >= 1; Take does not check. start and end are the calendar window of
// now (lim.CalendarBounds(now)), computed by the caller:
//
//	if start > Start: Start, End, Count = start, end, 0
//	if start < Start: now = Start               (clock went back: count it in the latest window)
//	e = max(1, End - now)                      (ms to the end of the window)
//	c > L:               deny, cost exceeds capacity, RetryAfter = NeverRetry
//	Count + c <= L:      admit, Count += c
//	otherwise:           deny, limited, RetryAfter = e
//	Remaining  = max(0, L - Count)
//	ResetAfter = e if Count > 0, else 0
//
// (e >= 1 always holds when start and end are now's window; the bound keeps a Redis store whose
// clock is ahead of the caller's from reporting 0.)
func (s *CalendarWindowState) Take(lim Limit, c, now, start, end int64) Result {
	return s.take(&lim, c, now, start, end)
}

// take is Take with lim by reference, for the store's hot path.
func (s *CalendarWindowState) take(lim *Limit, c, now, start, end int64) Result {
	L, e := lim.Limit, s.roll(now, start, end)
	var r Result // as in FixedWindowState.take
	switch {
	case c > L:
		r = costExceedsCapacity(L)
	case s.Count+c <= L:
		s.Count += c
		r = Result{Allowed: true, Limit: L}
	default:
		r = Result{Limit: L, RetryAfter: ms(e), Reason: ReasonLimited}
	}
	r.Remaining = max(0, L-s.Count)
	if s.Count > 0 {
		r.ResetAfter = ms(e)
	}
	return r
}

// roll brings s forward to now, whose window is [start, end), and returns the ms to the end
// of its window (at least 1), from now or, when the clock went back, from its start.
func (s *CalendarWindowState) roll(now, start, end int64) int64 {
	if start > s.Start {
		s.Start, s.End, s.Count = start, end, 0
	} else if start < s.Start {
		now = s.Start
	}
	return max(1, s.End-now)
}
