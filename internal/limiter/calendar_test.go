package limiter

import (
	"context"
	"testing"
	"time"
)

func berlin(t *testing.T) *time.Location {
	t.Helper()
	z, err := LoadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	return z
}

func calendarLimit(t *testing.T, p Period, zone string, limit int64) Limit {
	t.Helper()
	z, err := LoadZone(zone)
	if err != nil {
		t.Fatal(err)
	}
	lim := Limit{Algorithm: FixedWindow, Limit: limit, Window: p.Nominal(), Period: p, Zone: z}
	if err := lim.Validate(); err != nil {
		t.Fatal(err)
	}
	return lim
}

// TestCalendarBounds checks the windows' real boundaries: local midnights, months of their
// real lengths (a leap February), ISO weeks from Monday, and the 23- and 25-hour days of both
// DST changes of Europe/Berlin.
func TestCalendarBounds(t *testing.T) {
	b := berlin(t)
	at := func(y int, m time.Month, d, h, min int) time.Time { return time.Date(y, m, d, h, min, 0, 0, b) }
	tests := map[string]struct {
		period     Period
		now        time.Time
		start, end time.Time
		hours      int64
	}{
		"month end, last ms of January": {Month, at(2026, 1, 31, 23, 59).Add(59999 * time.Millisecond),
			at(2026, 1, 1, 0, 0), at(2026, 2, 1, 0, 0), 31 * 24},
		"month start, first instant of February": {Month, at(2026, 2, 1, 0, 0),
			at(2026, 2, 1, 0, 0), at(2026, 3, 1, 0, 0), 28 * 24},
		"leap February": {Month, at(2028, 2, 29, 12, 0),
			at(2028, 2, 1, 0, 0), at(2028, 3, 1, 0, 0), 29 * 24},
		"leap day": {Day, at(2028, 2, 29, 23, 0),
			at(2028, 2, 29, 0, 0), at(2028, 3, 1, 0, 0), 24},
		"March with the spring DST change": {Month, at(2026, 3, 29, 4, 0),
			at(2026, 3, 1, 0, 0), at(2026, 4, 1, 0, 0), 31*24 - 1},
		"spring DST day is 23 hours": {Day, at(2026, 3, 29, 3, 30),
			at(2026, 3, 29, 0, 0), at(2026, 3, 30, 0, 0), 23},
		"autumn DST day is 25 hours": {Day, at(2026, 10, 25, 1, 0),
			at(2026, 10, 25, 0, 0), at(2026, 10, 26, 0, 0), 25},
		"autumn DST day, after the repeated hour": {Day, time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC),
			at(2026, 10, 25, 0, 0), at(2026, 10, 26, 0, 0), 25},
		"ISO week from Monday, asked on Sunday": {Week, at(2026, 3, 29, 22, 0),
			at(2026, 3, 23, 0, 0), at(2026, 3, 30, 0, 0), 7*24 - 1},
		"ISO week, asked on Monday midnight": {Week, at(2026, 3, 30, 0, 0),
			at(2026, 3, 30, 0, 0), at(2026, 4, 6, 0, 0), 7 * 24},
		"ISO week across a year end": {Week, at(2027, 1, 1, 9, 0),
			at(2026, 12, 28, 0, 0), at(2027, 1, 4, 0, 0), 7 * 24},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			lim := Limit{Algorithm: FixedWindow, Limit: 1, Window: tc.period.Nominal(), Period: tc.period, Zone: b}
			start, end := lim.CalendarBounds(tc.now.UnixMilli())
			if start != tc.start.UnixMilli() || end != tc.end.UnixMilli() {
				t.Fatalf("bounds of %s: [%s, %s), want [%s, %s)", tc.now.In(b),
					time.UnixMilli(start).In(b), time.UnixMilli(end).In(b), tc.start, tc.end)
			}
			if got := (end - start) / 3_600_000; got != tc.hours || (end-start)%3_600_000 != 0 {
				t.Fatalf("window of %d ms, want %d hours", end-start, tc.hours)
			}
		})
	}
}

// TestCalendarWindowSteps steps a calendar window across the boundaries the zone makes: the
// denial's RetryAfter and the ResetAfter count to the real boundary, and the next window
// starts fresh at it, not a millisecond earlier.
func TestCalendarWindowSteps(t *testing.T) {
	b := berlin(t)
	type step struct {
		at   time.Time
		cost int64
		want Result
	}
	ms := func(d time.Duration) time.Duration { return d }
	tests := map[string]struct {
		lim   Limit
		steps []step
	}{
		"month end": {calendarLimit(t, Month, "Europe/Berlin", 2), []step{
			{time.Date(2026, 1, 31, 23, 0, 0, 0, b), 2, Result{Allowed: true, Remaining: 0, ResetAfter: ms(time.Hour)}},
			{time.Date(2026, 1, 31, 23, 59, 59, 999e6, b), 1, Result{Remaining: 0, ResetAfter: ms(time.Millisecond), RetryAfter: time.Millisecond, Reason: ReasonLimited}},
			{time.Date(2026, 2, 1, 0, 0, 0, 0, b), 1, Result{Allowed: true, Remaining: 1, ResetAfter: 28 * 24 * time.Hour}},
			{time.Date(2026, 2, 1, 0, 0, 0, 0, b), 3, Result{Remaining: 1, ResetAfter: 28 * 24 * time.Hour, RetryAfter: NeverRetry, Reason: ReasonCostExceedsCapacity}},
		}},
		"leap day": {calendarLimit(t, Day, "Europe/Berlin", 1), []step{
			{time.Date(2028, 2, 29, 12, 0, 0, 0, b), 1, Result{Allowed: true, ResetAfter: 12 * time.Hour}},
			{time.Date(2028, 2, 29, 18, 0, 0, 0, b), 1, Result{ResetAfter: 6 * time.Hour, RetryAfter: 6 * time.Hour, Reason: ReasonLimited}},
			{time.Date(2028, 3, 1, 0, 0, 0, 0, b), 1, Result{Allowed: true, ResetAfter: 24 * time.Hour}},
		}},
		"spring DST: midnight to midnight is 23 hours": {calendarLimit(t, Day, "Europe/Berlin", 1), []step{
			{time.Date(2026, 3, 29, 0, 0, 0, 0, b), 1, Result{Allowed: true, ResetAfter: 23 * time.Hour}},
			{time.Date(2026, 3, 29, 1, 0, 0, 0, b), 1, Result{ResetAfter: 22 * time.Hour, RetryAfter: 22 * time.Hour, Reason: ReasonLimited}},
		}},
		"autumn DST: midnight to midnight is 25 hours": {calendarLimit(t, Day, "Europe/Berlin", 1), []step{
			{time.Date(2026, 10, 25, 0, 0, 0, 0, b), 1, Result{Allowed: true, ResetAfter: 25 * time.Hour}},
			{time.Date(2026, 10, 25, 23, 0, 0, 0, b), 1, Result{ResetAfter: time.Hour, RetryAfter: time.Hour, Reason: ReasonLimited}},
			{time.Date(2026, 10, 26, 0, 0, 0, 0, b), 1, Result{Allowed: true, ResetAfter: 24 * time.Hour}},
		}},
		"clock back counts in the latest window": {calendarLimit(t, Day, "UTC", 2), []step{
			{time.Date(2026, 5, 2, 0, 0, 0, 0, time.UTC), 1, Result{Allowed: true, Remaining: 1, ResetAfter: 24 * time.Hour}},
			{time.Date(2026, 5, 1, 23, 0, 0, 0, time.UTC), 1, Result{Allowed: true, Remaining: 0, ResetAfter: 24 * time.Hour}},
			{time.Date(2026, 5, 1, 23, 0, 0, 0, time.UTC), 1, Result{Remaining: 0, ResetAfter: 24 * time.Hour, RetryAfter: 24 * time.Hour, Reason: ReasonLimited}},
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var s CalendarWindowState
			store := NewMemoryStore(MemoryStoreOptions{})
			for i, st := range tc.steps {
				now := st.at.UnixMilli()
				start, end := tc.lim.CalendarBounds(now)
				want := st.want
				want.Limit = tc.lim.Limit
				if got := s.Take(tc.lim, st.cost, now, start, end); got != want {
					t.Fatalf("step %d at %s: got %+v, want %+v", i, st.at, got, want)
				}
				got, err := store.Take(context.Background(), "k", tc.lim, st.cost, st.at)
				if err != nil || got != want {
					t.Fatalf("step %d at %s: MemoryStore %+v (%v), want %+v", i, st.at, got, err, want)
				}
			}
		})
	}
}

func TestCalendarValidate(t *testing.T) {
	b := berlin(t)
	bad := map[string]Limit{
		"period on a bucket": {Algorithm: TokenBucket, Limit: 1, Window: Day.Nominal(), Period: Day, Zone: b},
		"no zone":            {Algorithm: FixedWindow, Limit: 1, Window: Day.Nominal(), Period: Day},
		"unknown period":     {Algorithm: FixedWindow, Limit: 1, Window: time.Hour, Period: "Year", Zone: b},
		"wrong window":       {Algorithm: FixedWindow, Limit: 1, Window: time.Hour, Period: Day, Zone: b},
	}
	for name, lim := range bad {
		if lim.Validate() == nil {
			t.Errorf("%s: Validate accepted %+v", name, lim)
		}
	}
	if _, err := LoadZone("Europe/Nowhere"); err == nil {
		t.Error("LoadZone accepted Europe/Nowhere")
	}
	if _, err := LoadZone("Local"); err == nil {
		t.Error("LoadZone accepted Local")
	}
}
