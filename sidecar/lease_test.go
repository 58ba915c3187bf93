package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// admission is one request the upstream saw, so one the sidecars admitted: sent is when the
// client began sending it (the X-Sent header, ns), arrived when the upstream received it. The
// sidecar decided it in between, at its own clock and Redis's, which on one machine are the
// same clock.
type admission struct{ sent, arrived int64 }

// clockMargin is added to every interval the bound is checked on: Redis's TIME and the lease
// engine's expiry are whole milliseconds, each truncating real time by less than 1 ms.
const clockMargin = 2 * time.Millisecond

// TestFaultLeasedSidecarsHoldTheBound runs two sidecar binaries sharing one hot leased key
// (X-Tenant) through one redis-server, under closed-loop load from 12 clients in cycles of
// trickle (below the limit: the pods lease), spike (past it: denials) and pause (the leases
// end, the limit refills), and
// checks the issue-14 bound on every interval of the admissions the upstream recorded:
// TokenBucket admits at most burst + rate × (T + maxAge) in any interval of T, FixedWindow at
// most limit in every aligned window.
//
// The decision instants are not observed, only that each lies between the client's send and
// the upstream's receipt; an interval is charged only the admissions whose whole span lies
// in it (those were certainly decided in it), so the check is sound whatever the machine's
// load, and never reads a wall-clock duration as a speed. The failure mode is Closed with a
// long Redis timeout, so a slow Redis answers 503 rather than admitting with a local share.
func TestFaultLeasedSidecarsHoldTheBound(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and loads two sidecars")
	}
	// Limits a slow machine's spike still exceeds: under make test's load the 12 clients got
	// 2,399 requests through the two sidecars in 4 cycles, and a limit of 1,000 a second with a
	// burst of 200 denied none of them. The trickle (300 a second) stays below these.
	bucket := func(r *policy.Rule) { r.Limit, r.WindowMs, r.Burst = 400, 1000, 80 }
	cases := map[string]struct {
		alg     func(*policy.Rule)
		perUser bool
	}{
		"TokenBucket": {bucket, false},
		"FixedWindow": {func(r *policy.Rule) { r.Algorithm, r.Limit, r.WindowMs, r.Burst = "FixedWindow", 200, 500, 0 }, false},
		// Every fourth request also matches an exact rule (X-Block: yes) of one unit an hour,
		// which denies all of them but the first, whatever the load, while the leased rule
		// admits many: reservations taken and cancelled under load.
		"TokenBucket and an exact rule": {bucket, true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			const maxAge = 200 * time.Millisecond
			rule := st.Rule("tenant", 1, time.Second, tc.alg, func(r *policy.Rule) {
				r.Key = []policy.KeyPart{{Source: policy.SourceHeader, Name: "X-Tenant"}}
				r.Lease = &policy.Lease{MaxAgeMs: maxAge.Milliseconds()}
			})
			rules := []policy.Rule{rule}
			if tc.perUser {
				rules = append(rules, st.Rule("blocked", 1, time.Hour, func(r *policy.Rule) {
					r.Match = &policy.Match{Headers: []policy.HeaderMatch{{Name: "X-Block", Value: "yes"}}}
					r.Key = []policy.KeyPart{{Source: policy.SourceHeader, Name: "X-Block"}}
				}))
			}
			doc := st.Doc(t, st.Policy("api", rules, func(p *policy.Policy) {
				p.Replicas, p.FailureMode = 2, policy.FailureClosed
			}))
			admits, notCharged := runLeasedFleet(t, doc, 2, 6, 4)
			if tc.perUser && notCharged == 0 {
				t.Errorf("the blocked rule denied no request the leased rule admitted")
			}
			lim := rule.Limit
			if rule.Algorithm == "TokenBucket" {
				checkBucketBound(t, admits, lim, rule.Burst, time.Duration(rule.WindowMs)*time.Millisecond, maxAge)
			} else {
				checkWindowBound(t, admits, lim, time.Duration(rule.WindowMs)*time.Millisecond)
			}
		})
	}
}

// runLeasedFleet starts pods sidecars with the policies doc against one redis-server, drives
// each with callers closed-loop clients for cycles of trickle, spike and pause, and returns
// the admissions the upstream recorded, sorted by sent, and how many times rule tenant
// admitted a request that another rule denied (not charged). It fails the test unless the
// load both took leases and was denied (so the bound was exercised near the limit).
func runLeasedFleet(t *testing.T, doc []byte, pods, callers, cycles int) ([]admission, float64) {
	t.Helper()
	var mu sync.Mutex
	var admits []admission
	bad := atomic.Int64{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now().UnixNano()
		sent, err := strconv.ParseInt(r.Header.Get("X-Sent"), 10, 64)
		if err != nil {
			bad.Add(1)
		} else {
			mu.Lock()
			admits = append(admits, admission{sent, arrived})
			mu.Unlock()
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	redis := redisserver.StartTest(t)
	cfg := filepath.Join(t.TempDir(), "policies.json")
	if err := os.WriteFile(cfg, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	fleet := make([]*sidecar, pods)
	for i := range fleet {
		fleet[i] = launchSidecar(t, up.URL, cfg, "--redis-url", redis.URL(), "--redis-timeout", "2s")
	}

	// Each cycle: 400 ms of trickle (each client waits pace between requests: below the
	// limit, so the pods lease), 300 ms of spike (closed loop at full speed: past the limit),
	// 300 ms off (longer than maxAge: the leases end and the limit refills).
	const cycle, trickle, spike, pace = time.Second, 400 * time.Millisecond, 300 * time.Millisecond, 40 * time.Millisecond
	var codes sync.Map // status -> *atomic.Int64
	count := func(code int) *atomic.Int64 {
		c, _ := codes.LoadOrStore(code, new(atomic.Int64))
		return c.(*atomic.Int64)
	}
	start := time.Now()
	end := start.Add(time.Duration(cycles) * cycle)
	var wg sync.WaitGroup
	for _, s := range fleet {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: callers}}
		defer client.CloseIdleConnections()
		for range callers {
			wg.Go(func() {
				for i := 0; ; i++ {
					now := time.Now()
					if !now.Before(end) {
						return
					}
					switch at := now.Sub(start) % cycle; {
					case at < trickle:
						time.Sleep(pace)
					case at >= trickle+spike:
						time.Sleep(cycle - at)
						continue
					}
					req, _ := http.NewRequest(http.MethodGet, s.URL()+"/", nil)
					req.Header.Set("X-Tenant", "hot")
					if i%4 == 3 {
						req.Header.Set("X-Block", "yes")
					}
					req.Header.Set("X-Sent", strconv.FormatInt(time.Now().UnixNano(), 10))
					resp, err := client.Do(req)
					if err != nil {
						count(-1).Add(1)
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					count(resp.StatusCode).Add(1)
				}
			})
		}
	}
	wg.Wait()
	var leases, decisions, calls, notCharged float64
	for _, s := range fleet {
		notCharged += s.metric(t, "sluice_requests_total", `rule="tenant"`, `decision="not_charged"`)
		leases += s.metric(t, "sluice_leases_total")
		decisions += s.metric(t, "sluice_lease_decisions_total")
		calls += s.metric(t, "sluice_lease_store_calls_total")
	}
	summary := ""
	codes.Range(func(k, v any) bool {
		summary += fmt.Sprintf(" %d:%d", k, v.(*atomic.Int64).Load())
		return true
	})
	t.Logf("statuses%s; %d admissions at the upstream; %.0f leases taken, %.3f store calls per decision; tenant not charged %.0f times",
		summary, len(admits), leases, calls/max(decisions, 1), notCharged)
	if bad.Load() > 0 {
		t.Fatalf("%d upstream requests without X-Sent", bad.Load())
	}
	if got := count(http.StatusOK).Load(); got != int64(len(admits)) {
		t.Errorf("clients saw %d admitted, the upstream %d", got, len(admits))
	}
	if leases == 0 || count(http.StatusTooManyRequests).Load() == 0 {
		t.Fatalf("the load did not exercise the bound: %.0f leases, %d denials", leases, count(http.StatusTooManyRequests).Load())
	}
	slices.SortFunc(admits, func(a, b admission) int { return int(a.sent - b.sent) })
	return admits, notCharged
}

// checkBucketBound checks a bucket's bound, burst + limit/window × (T + maxAge), on every
// interval [s, e] with s a send and e an arrival, charging it the admissions whose span lies
// in it (admits sorted by sent). O(n²), n a few thousand.
func checkBucketBound(t *testing.T, admits []admission, limit, burst int64, window, maxAge time.Duration) {
	t.Helper()
	byArrival := slices.Clone(admits)
	slices.SortFunc(byArrival, func(a, b admission) int { return int(a.arrived - b.arrived) })
	W, extra := int64(window), int64(maxAge+clockMargin)
	// The least slack, W × bound − W × admitted, over every interval.
	bestSlack, bestN, bestT := int64(1<<62), 0, int64(0)
	for _, s := range admits {
		n := 0
		for _, a := range byArrival {
			if a.sent < s.sent {
				continue
			}
			n++
			T := a.arrived - s.sent
			if slack := burst*W + limit*(T+extra) - int64(n)*W; slack < bestSlack {
				bestSlack, bestN, bestT = slack, n, T
			}
		}
	}
	bound := (burst*W + limit*(bestT+extra)) / W
	t.Logf("least slack: %d admitted in %v, bound %d (burst %d + %d/%v × (T + maxAge %v + margin %v)); the exact rule's own bound there %d",
		bestN, time.Duration(bestT), bound, burst, limit, window, maxAge, clockMargin, (burst*W+limit*(bestT+int64(clockMargin)))/W)
	if bestSlack < 0 {
		t.Errorf("%d admitted in an interval of %v, over the bound %d", bestN, time.Duration(bestT), bound)
	}
}

// checkWindowBound checks that every aligned window admits at most limit, charging a window
// the admissions whose span lies in it.
func checkWindowBound(t *testing.T, admits []admission, limit int64, window time.Duration) {
	t.Helper()
	W := int64(window)
	per := map[int64]int64{}
	for _, a := range admits {
		if w := a.sent / W; a.arrived/W == w {
			per[w]++
		}
	}
	worst, at := int64(0), int64(0)
	for w, n := range per {
		if n > worst {
			worst, at = n, w
		}
	}
	t.Logf("the fullest aligned window admitted %d (limit %d) of %d windows", worst, limit, len(per))
	if worst > limit {
		t.Errorf("the aligned window at %v admitted %d, over the limit %d", time.Unix(0, at*W), worst, limit)
	}
}
