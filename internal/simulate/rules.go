package simulate

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/policy"
)

// Rule is one rule of a multi-rule simulation: a name, its limit, and whether it is Shadow.
type Rule struct {
	Name   string
	Limit  limiter.Limit
	Shadow bool
	// CountWhen, when not empty, makes the rule check at admission and charge only requests
	// whose response status (a trace line's status=) is in one of the ranges, as the sidecar.
	CountWhen []policy.StatusRange
	// MinimumCost, when not 0, makes the rule a responseCost rule, as the sidecar: it is
	// charged MinimumCost at admission and, after the decision, what a trace line's cost=
	// reports beyond it (nothing more when the line has none).
	MinimumCost int64
}

// ParseRule parses NAME=ALGORITHM,LIMIT,WINDOW[,shadow][,countWhen=CODES][,responseCost=MIN]
// (e.g. per-ip=FixedWindow,5,1h): a rule of limit units per window, Burst the limit for the
// buckets. WINDOW may be a calendar period, PERIOD@ZONE (Calendar), for FixedWindow. CODES are
// status codes and ranges separated by '|', e.g. countWhen=401|403|500-599; MIN is a
// responseCost rule's minimumCost.
func ParseRule(s string) (Rule, error) {
	name, spec, ok := strings.Cut(s, "=")
	f := strings.Split(spec, ",")
	if !ok || name == "" || len(f) < 3 || len(f) > 6 {
		return Rule{}, fmt.Errorf("rule %q: %s", s, ruleSyntax)
	}
	var (
		shadow    bool
		countWhen []policy.StatusRange
		minimum   int64
	)
	for _, opt := range f[3:] {
		codes, isCountWhen := strings.CutPrefix(opt, "countWhen=")
		min, isCost := strings.CutPrefix(opt, "responseCost=")
		switch {
		case opt == "shadow":
			shadow = true
		case isCost:
			var err error
			if minimum, err = strconv.ParseInt(min, 10, 64); err != nil || minimum < 1 {
				return Rule{}, fmt.Errorf("rule %q: responseCost=%s: the minimumCost must be a whole number of at least 1", s, min)
			}
		case isCountWhen:
			for _, c := range strings.Split(codes, "|") {
				lo, hi, isRange := strings.Cut(c, "-")
				if !isRange {
					hi = lo
				}
				l, err1 := strconv.Atoi(lo)
				h, err2 := strconv.Atoi(hi)
				if err1 != nil || err2 != nil || l < 100 || h > 599 || l > h {
					return Rule{}, fmt.Errorf("rule %q: %q is not a status code from 100 to 599 or a range of them", s, c)
				}
				countWhen = append(countWhen, policy.StatusRange{Lo: l, Hi: h})
			}
		default:
			return Rule{}, fmt.Errorf("rule %q: %s", s, ruleSyntax)
		}
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return Rule{}, fmt.Errorf("rule %q: limit %q is not a whole number", s, f[1])
	}
	r := Rule{Name: name, Limit: limiter.Limit{Algorithm: limiter.Algorithm(f[0]), Limit: n}, Shadow: shadow, CountWhen: countWhen, MinimumCost: minimum}
	if strings.Contains(f[2], "@") {
		if err := Calendar(&r.Limit, f[2]); err != nil {
			return Rule{}, fmt.Errorf("rule %q: %w", s, err)
		}
	} else if r.Limit.Window, err = time.ParseDuration(f[2]); err != nil {
		return Rule{}, fmt.Errorf("rule %q: window: %w", s, err)
	}
	if err := r.Limit.Validate(); err != nil {
		return Rule{}, fmt.Errorf("rule %q: %w", s, err)
	}
	if len(countWhen) > 0 && !r.Limit.LateChargeable() {
		return Rule{}, fmt.Errorf("rule %q: countWhen applies only to FixedWindow and TokenBucket", s)
	}
	if minimum > 0 {
		switch {
		case !r.Limit.LateChargeable():
			return Rule{}, fmt.Errorf("rule %q: responseCost applies only to FixedWindow and TokenBucket", s)
		case len(countWhen) > 0:
			return Rule{}, fmt.Errorf("rule %q: responseCost and countWhen cannot be combined", s)
		case minimum > r.Limit.Capacity():
			return Rule{}, fmt.Errorf("rule %q: responseCost=%d exceeds the limit %d", s, minimum, r.Limit.Capacity())
		}
	}
	return r, nil
}

const ruleSyntax = "want NAME=ALGORITHM,LIMIT,WINDOW[,shadow][,countWhen=CODES][,responseCost=MIN]"

// Calendar makes lim a calendar window from PERIOD@ZONE, e.g. Month@Europe/Berlin (Day, Week
// or Month; the zone an IANA name, UTC when empty): its Period, Zone and Window (the period's
// nominal length).
func Calendar(lim *limiter.Limit, spec string) error {
	period, zone, _ := strings.Cut(spec, "@")
	p := limiter.Period(period)
	if p.Nominal() == 0 {
		return fmt.Errorf("calendar %q: period %q is not Day, Week or Month", spec, period)
	}
	z, err := limiter.LoadZone(zone)
	if err != nil {
		return fmt.Errorf("calendar %q: %w", spec, err)
	}
	lim.Period, lim.Zone, lim.Window = p, z, p.Nominal()
	return nil
}

// ReplayRules replays a multi-rule trace through store as the sidecar decides a request:
// all of its rules in one TakeRequest, admitted only when every enforced rule admits, and only
// then charged. Each line of in is "<ms> RULE=KEY [RULE=KEY...]" (ms non-decreasing, blank
// lines ignored): the request matches the rules named, each with that key (a rule named twice
// takes twice); a field status=NNN is the response's status (200 when absent), which decides
// whether the countWhen rules charge it (after the decision, as the sidecar); a field cost=N
// is the cost the response reports, which a responseCost rule is charged beyond its
// minimumCost after the decision (a line without one costs the minimum). For each request it
// writes "<ms> allow charged=A,B", or "<ms> deny by=A charged=-" with the enforced rules that
// denied, then "allowed=N denied=M". It stops at the first bad line or store error, having
// written the decisions before it.
func ReplayRules(in io.Reader, out io.Writer, store limiter.RequestStore, rules []Rule) error {
	byName := make(map[string]Rule, len(rules))
	for _, r := range rules {
		if _, dup := byName[r.Name]; dup {
			return fmt.Errorf("rule %q given twice", r.Name)
		}
		byName[r.Name] = r
	}
	w := bufio.NewWriter(out)
	defer func() { _ = w.Flush() }()
	ctx := context.Background()
	prev := int64(-1)
	var allowed, denied int
	sc := bufio.NewScanner(in)
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		at, err := strconv.ParseInt(f[0], 10, 64)
		switch {
		case err != nil:
			return fmt.Errorf("line %d: %q is not a whole number of ms since the Unix epoch", line, f[0])
		case at < 0 || at > limiter.MaxNowMs:
			return fmt.Errorf("line %d: %d is outside 0..%d ms since the Unix epoch", line, at, limiter.MaxNowMs)
		case at < prev:
			return fmt.Errorf("line %d: %d is before the arrival before it (%d); arrivals must not decrease", line, at, prev)
		}
		prev = at
		takes, names, status, cost, err := parseRequest(f[1:], byName)
		if err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		res := make([]limiter.Result, len(takes))
		admitted, err := store.TakeRequest(ctx, takes, time.UnixMilli(at), res)
		if err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		var charged, by []string
		charge := func(t *limiter.Take, n int64) error {
			ch, ok := store.(limiter.Charger)
			if !ok {
				return fmt.Errorf("line %d: the store takes no charges after the response", line)
			}
			if _, err := ch.Charge(ctx, t.Key, t.Limit, n, time.UnixMilli(at)); err != nil {
				return fmt.Errorf("line %d: %w", line, err)
			}
			return nil
		}
		for i := range takes {
			switch {
			case admitted && takes[i].Check:
				if !policy.Counts(byName[names[i]].CountWhen, status) {
					continue
				}
				if err := charge(&takes[i], takes[i].N); err != nil {
					return err
				}
				charged = append(charged, names[i])
			case admitted && res[i].Allowed:
				if byName[names[i]].MinimumCost > 0 && cost > takes[i].N {
					if err := charge(&takes[i], cost-takes[i].N); err != nil {
						return err
					}
				}
				charged = append(charged, names[i])
			case !admitted && !res[i].Allowed && !takes[i].Shadow:
				by = append(by, names[i])
			}
		}
		if admitted {
			allowed++
			fmt.Fprintf(w, "%d allow charged=%s\n", at, list(charged))
		} else {
			denied++
			fmt.Fprintf(w, "%d deny by=%s charged=-\n", at, list(by))
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	fmt.Fprintf(w, "allowed=%d denied=%d\n", allowed, denied)
	return w.Flush()
}

// parseRequest parses a trace line's fields after the time: RULE=KEY, status= and cost=
// (-1 when absent).
func parseRequest(f []string, byName map[string]Rule) (takes []limiter.Take, names []string, status int, cost int64, err error) {
	status, cost = 200, -1
	for _, kv := range f {
		if v, isCost := strings.CutPrefix(kv, "cost="); isCost {
			if cost, err = strconv.ParseInt(v, 10, 64); err != nil || cost < 0 {
				return nil, nil, 0, 0, fmt.Errorf("cost %q is not a whole number of at least 0", v)
			}
			continue
		}
		if v, isStatus := strings.CutPrefix(kv, "status="); isStatus {
			if status, err = strconv.Atoi(v); err != nil || status < 100 || status > 599 {
				return nil, nil, 0, 0, fmt.Errorf("status %q is not a status code from 100 to 599", v)
			}
			continue
		}
		name, k, ok := strings.Cut(kv, "=")
		r, known := byName[name]
		if !ok || !known {
			return nil, nil, 0, 0, fmt.Errorf("%q is not RULE=KEY of a rule given", kv)
		}
		// Each rule its own key space, as the sidecar's keys name their policy and rule.
		takes = append(takes, limiter.Take{Key: name + "\x00" + k, Limit: r.Limit, N: max(1, r.MinimumCost), Shadow: r.Shadow, Check: len(r.CountWhen) > 0})
		names = append(names, name)
	}
	return takes, names, status, cost, nil
}

func list(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}
