package main

// The conformance tests drive the built sluice-ratelimit binary, against a real redis-server,
// with a gRPC client through the scenarios of envoyproxy/ratelimit's integration suite
// (test/integration there): the domains `basic` and `another`, limits per second, minute, hour
// and day, key-only and value-specific descriptors, nested descriptors, two descriptors in one
// request, hits_addend, a configuration reload and shadow mode. The policies are
// RateLimitPolicies, rendered with `sluicectl render`'s code. Where Sluice deliberately differs
// (docs/envoy.md, "Answers"), the test asserts Sluice's documented behaviour and a comment names
// the difference.
//
// No assertion depends on timing. Windows of a minute or more make counts decide; a round of
// requests that a window's end split in two (the windows are aligned to the epoch, as the
// peer's) is repeated with a fresh descriptor, not judged (see inOneWindow). Of per-second limits
// only what one request shows is asserted.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/policyfile"
	"github.com/sluice-dev/sluice/internal/render"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
	"github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// conformancePolicies are envoyproxy/ratelimit's test configurations basic.yaml and
// another.yaml (keys key1, one_per_minute, key2, key3, key4) as RateLimitPolicies, with the
// shapes its suite and documentation exercise beside them: a value-specific descriptor (plan),
// a nested descriptor (client → user) and a shadow limit. Every rule fails closed, so that a
// Redis problem shows as an error instead of a local decision with other counts.
const conformancePolicies = `
apiVersion: sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: basic, namespace: conformance}
spec:
  domain: basic
  failureMode: Closed
  rules:
  - name: key1                 # key: key1, rate_limit: {unit: second, requests_per_unit: 50}
    match: {descriptors: [{key: key1}]}
    key: [{descriptor: {key: key1}}]
    algorithm: FixedWindow
    limit: 50
    window: 1s
  - name: one-per-minute       # key: one_per_minute, rate_limit: {unit: minute, requests_per_unit: 1}
    match: {descriptors: [{key: one_per_minute}]}
    key: [{descriptor: {key: one_per_minute}}]
    algorithm: FixedWindow
    limit: 1
    window: 1m
  - name: gold                 # key: plan, value: gold (one counter), 5 a minute
    match: {descriptors: [{key: plan, value: gold}]}
    key: [{descriptor: {key: plan}}]
    algorithm: FixedWindow
    limit: 5
    window: 1m
  - name: mobile-user          # key: client, value: mobile → descriptors: [key: user], 3 an hour
    match: {descriptors: [{key: client, value: mobile}, {key: user}]}
    key: [{descriptor: {key: user}}]
    algorithm: FixedWindow
    limit: 3
    window: 1h
  - name: shadow               # key: shadow, shadow_mode: true, 2 an hour
    match: {descriptors: [{key: shadow}]}
    key: [{descriptor: {key: shadow}}]
    algorithm: FixedWindow
    limit: 2
    window: 1h
    mode: Shadow
---
apiVersion: sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: another, namespace: conformance}
spec:
  domain: another
  failureMode: Closed
  rules:
  - name: key2                 # key: key2, rate_limit: {unit: minute, requests_per_unit: 20}
    match: {descriptors: [{key: key2}]}
    key: [{descriptor: {key: key2}}]
    algorithm: FixedWindow
    limit: 20
    window: 1m
  - name: key3                 # key: key3, rate_limit: {unit: hour, requests_per_unit: 10}
    match: {descriptors: [{key: key3}]}
    key: [{descriptor: {key: key3}}]
    algorithm: FixedWindow
    limit: 10
    window: 1h
  - name: key4                 # key: key4, rate_limit: {unit: day, requests_per_unit: 20}
    match: {descriptors: [{key: key4}]}
    key: [{descriptor: {key: key4}}]
    algorithm: FixedWindow
    limit: 20
    window: 24h
`

// reloadPolicy is envoyproxy/ratelimit's reload.yaml (domain reload, key1 50 a second) as a
// policy; its `block` key (requests_per_unit: 0) has no equivalent (a Sluice limit is at least 1).
const reloadPolicy = `
---
apiVersion: sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: reload, namespace: conformance}
spec:
  domain: reload
  failureMode: Closed
  rules:
  - name: key1
    match: {descriptors: [{key: key1}]}
    key: [{descriptor: {key: key1}}]
    algorithm: FixedWindow
    limit: 50
    window: 1s
`

func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs redis-server")
	}
	redis := redisserver.StartTest(t)
	cfg := filepath.Join(t.TempDir(), policy.DataKey)
	writePolicies(t, cfg, conformancePolicies)
	srv := startRLS(t, cfg, redis.URL())
	c := srv.client

	t.Run("unknown domain: OK without a limit", func(t *testing.T) {
		resp := c.ask(t, "foo", 1, desc("hello", "world"))
		wantCode(t, resp, rlsv3.RateLimitResponse_OK)
		wantUnlimited(t, resp, 0)
	})

	t.Run("unknown descriptor of a known domain: OK without a limit", func(t *testing.T) {
		resp := c.ask(t, "basic", 1, desc("nokey", "x"))
		wantCode(t, resp, rlsv3.RateLimitResponse_OK)
		wantUnlimited(t, resp, 0)
	})

	t.Run("per second: one hit leaves 49 of 50", func(t *testing.T) {
		resp := c.ask(t, "basic", 1, desc("key1", "foo"))
		wantCode(t, resp, rlsv3.RateLimitResponse_OK)
		st := wantStatus(t, resp, 0, rlsv3.RateLimitResponse_OK, 50, rlsv3.RateLimitResponse_RateLimit_SECOND, 49)
		wantResetWithin(t, st, time.Second)
	})

	t.Run("per second: a cost above the limit is over it", func(t *testing.T) {
		// The peer charges the 51 hits and answers OVER_LIMIT until the second ends; Sluice
		// charges nothing and, as no wait lets a cost of 51 pass a limit of 50, sends no
		// duration_until_reset (docs/envoy.md, "Answers").
		resp := c.ask(t, "basic", 51, desc("key1", "big"))
		wantCode(t, resp, rlsv3.RateLimitResponse_OVER_LIMIT)
		st := wantStatus(t, resp, 0, rlsv3.RateLimitResponse_OVER_LIMIT, 50, rlsv3.RateLimitResponse_RateLimit_SECOND, 0)
		if st.GetDurationUntilReset() != nil {
			t.Errorf("duration_until_reset %v for a cost no wait lets pass, want none", st.GetDurationUntilReset().AsDuration())
		}
	})

	t.Run("one per minute", func(t *testing.T) {
		inOneWindow(t, func(r *round) {
			v := r.value("opm")
			r.wantStatus(c.ask(t, "basic", 1, desc("one_per_minute", v)), 0, rlsv3.RateLimitResponse_OK, 1, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0)
			r.wantStatus(c.ask(t, "basic", 1, desc("one_per_minute", v)), 0, rlsv3.RateLimitResponse_OVER_LIMIT, 1, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0)
		})
	})

	t.Run("per minute: 25 hits of a limit of 20, each value apart", func(t *testing.T) {
		inOneWindow(t, func(r *round) {
			v := r.value("minute")
			for i := range 25 {
				code, remaining := rlsv3.RateLimitResponse_OK, uint32(20-(i+1))
				if i >= 20 {
					code, remaining = rlsv3.RateLimitResponse_OVER_LIMIT, 0
				}
				resp := c.ask(t, "another", 1, desc("key2", v))
				r.wantOverall(resp, code)
				r.wantStatus(resp, 0, code, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE, remaining)
			}
			// A key without a value counts each value apart: another value has its own 20.
			r.wantStatus(c.ask(t, "another", 1, desc("key2", v+"-other")), 0, rlsv3.RateLimitResponse_OK, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE, 19)
		})
	})

	t.Run("per day: 21 hits of a limit of 20", func(t *testing.T) {
		inOneWindow(t, func(r *round) {
			v := r.value("day")
			for i := range 21 {
				code, remaining := rlsv3.RateLimitResponse_OK, uint32(20-(i+1))
				if i >= 20 {
					code, remaining = rlsv3.RateLimitResponse_OVER_LIMIT, 0
				}
				r.wantStatus(c.ask(t, "another", 1, desc("key4", v)), 0, code, 20, rlsv3.RateLimitResponse_RateLimit_DAY, remaining)
			}
		})
	})

	t.Run("two descriptors, one over the limit: all or nothing", func(t *testing.T) {
		inOneWindow(t, func(r *round) {
			v := r.value("two")
			for i := range 15 {
				resp := c.ask(t, "another", 1, desc("key2", v), desc("key3", v))
				if i < 10 {
					r.wantOverall(resp, rlsv3.RateLimitResponse_OK)
					r.wantStatus(resp, 0, rlsv3.RateLimitResponse_OK, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE, uint32(20-(i+1)))
					r.wantStatus(resp, 1, rlsv3.RateLimitResponse_OK, 10, rlsv3.RateLimitResponse_RateLimit_HOUR, uint32(10-(i+1)))
					continue
				}
				// The peer charges key2 although the request is denied (its remaining goes on
				// down, 9, 8, ...); Sluice charges neither descriptor of a denied request and
				// key2 reports the 10 it still has (docs/envoy.md, "Answers").
				r.wantOverall(resp, rlsv3.RateLimitResponse_OVER_LIMIT)
				r.wantStatus(resp, 0, rlsv3.RateLimitResponse_OK, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE, 10)
				r.wantStatus(resp, 1, rlsv3.RateLimitResponse_OVER_LIMIT, 10, rlsv3.RateLimitResponse_RateLimit_HOUR, 0)
			}
			// key2 alone: its counter holds the 10 hits of the admitted requests only.
			r.wantStatus(c.ask(t, "another", 1, desc("key2", v)), 0, rlsv3.RateLimitResponse_OK, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE, 9)
		})
	})

	t.Run("a value-specific descriptor: one counter for that value only", func(t *testing.T) {
		inOneWindow(t, func(r *round) {
			// One counter per value, and the value is fixed: a round cannot take a fresh
			// descriptor, so the test checks the counts relative to the first answer.
			first := c.ask(t, "basic", 1, desc("plan", "gold"))
			r.note(first)
			st := first.GetStatuses()[0]
			if st.GetCurrentLimit().GetRequestsPerUnit() != 5 || st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
				r.errorf("plan=gold: current_limit %v, want 5 per MINUTE", st.GetCurrentLimit())
			}
			for rem := int(st.GetLimitRemaining()) - 1; rem >= 0; rem-- {
				r.wantStatus(c.ask(t, "basic", 1, desc("plan", "gold")), 0, rlsv3.RateLimitResponse_OK, 5, rlsv3.RateLimitResponse_RateLimit_MINUTE, uint32(rem))
			}
			r.wantStatus(c.ask(t, "basic", 1, desc("plan", "gold")), 0, rlsv3.RateLimitResponse_OVER_LIMIT, 5, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0)
		})
		// Another value of the key matches no rule: unlimited.
		resp := c.ask(t, "basic", 1, desc("plan", "silver"))
		wantCode(t, resp, rlsv3.RateLimitResponse_OK)
		wantUnlimited(t, resp, 0)
	})

	t.Run("a nested descriptor: the path in order", func(t *testing.T) {
		inOneWindow(t, func(r *round) {
			u := r.value("user")
			for i := range 4 {
				code, remaining := rlsv3.RateLimitResponse_OK, uint32(3-(i+1))
				if i >= 3 {
					code, remaining = rlsv3.RateLimitResponse_OVER_LIMIT, 0
				}
				r.wantStatus(c.ask(t, "basic", 1, desc("client", "mobile", "user", u)), 0, code, 3, rlsv3.RateLimitResponse_RateLimit_HOUR, remaining)
			}
			// Each user of the leaf apart.
			r.wantStatus(c.ask(t, "basic", 1, desc("client", "mobile", "user", u+"-other")), 0, rlsv3.RateLimitResponse_OK, 3, rlsv3.RateLimitResponse_RateLimit_HOUR, 2)
		})
		for _, d := range []*rlsv3common.RateLimitDescriptor{
			desc("client", "web", "user", "u"),                  // another value on the path
			desc("client", "mobile"),                            // not the leaf
			desc("user", "u", "client", "mobile"),               // the entries out of order
			desc("client", "mobile", "user", "u", "extra", "x"), // below the leaf
		} {
			resp := c.ask(t, "basic", 1, d)
			wantCode(t, resp, rlsv3.RateLimitResponse_OK)
			wantUnlimited(t, resp, 0)
		}
	})

	t.Run("hits_addend of the request and of each descriptor", func(t *testing.T) {
		inOneWindow(t, func(r *round) {
			v := r.value("hits")
			m := rlsv3.RateLimitResponse_RateLimit_MINUTE
			r.wantStatus(c.ask(t, "another", 5, desc("key2", v)), 0, rlsv3.RateLimitResponse_OK, 20, m, 15)
			// A descriptor's own hits_addend wins over the request's.
			r.wantStatus(c.ask(t, "another", 5, withHits(desc("key2", v), 3)), 0, rlsv3.RateLimitResponse_OK, 20, m, 12)
			// A request's hits_addend of 0 is the protocol's default: one hit.
			r.wantStatus(c.ask(t, "another", 0, desc("key2", v)), 0, rlsv3.RateLimitResponse_OK, 20, m, 11)
			// A descriptor's hits_addend of 0 checks without charging.
			r.wantStatus(c.ask(t, "another", 1, withHits(desc("key2", v), 0)), 0, rlsv3.RateLimitResponse_OK, 20, m, 11)
			r.wantStatus(c.ask(t, "another", 1, desc("key2", v)), 0, rlsv3.RateLimitResponse_OK, 20, m, 10)
			r.wantStatus(c.ask(t, "another", 1, withHits(desc("key2", v), 10)), 0, rlsv3.RateLimitResponse_OK, 20, m, 0)
			// Full: the check answers OVER_LIMIT (not one more hit would pass), still
			// charging nothing, and a hit is over the limit.
			r.wantStatus(c.ask(t, "another", 1, withHits(desc("key2", v), 0)), 0, rlsv3.RateLimitResponse_OVER_LIMIT, 20, m, 0)
			r.wantStatus(c.ask(t, "another", 1, desc("key2", v)), 0, rlsv3.RateLimitResponse_OVER_LIMIT, 20, m, 0)

			// Two descriptors, each with its cost: its own, or the request's.
			w := v + "-pair"
			resp := c.ask(t, "another", 2, withHits(desc("key2", w), 4), desc("key3", w))
			r.wantOverall(resp, rlsv3.RateLimitResponse_OK)
			r.wantStatus(resp, 0, rlsv3.RateLimitResponse_OK, 20, m, 16)
			r.wantStatus(resp, 1, rlsv3.RateLimitResponse_OK, 10, rlsv3.RateLimitResponse_RateLimit_HOUR, 8)
			// A check beside a hit over the limit: nothing is charged, and the check reports
			// the room it has.
			resp = c.ask(t, "another", 1, withHits(desc("key2", w), 0), withHits(desc("key3", w), 9))
			r.wantOverall(resp, rlsv3.RateLimitResponse_OVER_LIMIT)
			r.wantStatus(resp, 0, rlsv3.RateLimitResponse_OK, 20, m, 16)
			r.wantStatus(resp, 1, rlsv3.RateLimitResponse_OVER_LIMIT, 10, rlsv3.RateLimitResponse_RateLimit_HOUR, 0)
			r.wantStatus(c.ask(t, "another", 1, desc("key3", w)), 0, rlsv3.RateLimitResponse_OK, 10, rlsv3.RateLimitResponse_RateLimit_HOUR, 7)
		})
	})

	t.Run("shadow mode: counted, never denied", func(t *testing.T) {
		before := srv.counter(t, `sluice_requests_total{decision="shadow_denied",policy="basic",rule="shadow"}`)
		inOneWindow(t, func(r *round) {
			v := r.value("shadow")
			for i := range 4 {
				resp := c.ask(t, "basic", 1, desc("shadow", v))
				r.wantOverall(resp, rlsv3.RateLimitResponse_OK)
				// Past the limit the status is OK with nothing remaining, as the peer's.
				r.wantStatus(resp, 0, rlsv3.RateLimitResponse_OK, 2, rlsv3.RateLimitResponse_RateLimit_HOUR, uint32(max(0, 2-(i+1))))
			}
		})
		if after := srv.counter(t, `sluice_requests_total{decision="shadow_denied",policy="basic",rule="shadow"}`); after < before+2 {
			t.Errorf("shadow_denied went from %d to %d, want at least 2 more", before, after)
		}
	})

	t.Run("statuses over the limit: current_limit, limit_remaining, duration_until_reset", func(t *testing.T) {
		inOneWindow(t, func(r *round) {
			v := r.value("over")
			var last *rlsv3.RateLimitResponse
			for range 11 {
				last = c.ask(t, "another", 1, desc("key3", v))
			}
			st := r.wantStatus(last, 0, rlsv3.RateLimitResponse_OVER_LIMIT, 10, rlsv3.RateLimitResponse_RateLimit_HOUR, 0)
			// <policy>/<rule>: `sluicectl render` names a policy by its name, the controller's
			// sluice-ratelimit-policies by <namespace>/<name>.
			if st.GetCurrentLimit().GetName() != "another/key3" {
				r.errorf("current_limit.name %q, want another/key3 (policy/rule)", st.GetCurrentLimit().GetName())
			}
			// The peer rounds duration_until_reset to whole seconds; Sluice's is exact (to the
			// millisecond): the time until the window ends, when this descriptor passes again.
			if st.GetDurationUntilReset() == nil {
				r.errorf("no duration_until_reset over the limit")
			} else if d := st.GetDurationUntilReset().AsDuration(); d <= 0 || d > time.Hour {
				r.errorf("duration_until_reset %v, want within the hour's window", d)
			}
		})
	})

	t.Run("configuration reload", func(t *testing.T) {
		probe := 0
		domainLimited := func(limited bool) func() error {
			return func() error {
				probe++
				got := c.ask(t, "reload", 1, desc("key1", "probe-"+strconv.Itoa(probe))).GetStatuses()[0].GetCurrentLimit() != nil
				if got != limited {
					return fmt.Errorf("domain reload limited: %v, want %v", got, limited)
				}
				return nil
			}
		}
		inOneWindow(t, func(r *round) {
			// A counter of the domains the file keeps, exhausted before the reload.
			v := r.value("reload")
			for range 10 {
				r.note(c.ask(t, "another", 1, desc("key3", v)))
			}
			// A domain the file does not have yet: unlimited.
			if resp := c.ask(t, "reload", 1, desc("key1", "before")); resp.GetStatuses()[0].GetCurrentLimit() != nil {
				r.errorf("domain reload limited before it is in the file: %v", resp)
			}
			writePolicies(t, cfg, conformancePolicies+reloadPolicy)
			sidecartest.Eventually(t, domainLimited(true))
			st := r.wantStatus(c.ask(t, "reload", 1, desc("key1", r.value("after"))), 0, rlsv3.RateLimitResponse_OK, 50, rlsv3.RateLimitResponse_RateLimit_SECOND, 49)
			if d := st.GetDurationUntilReset().AsDuration(); st.GetDurationUntilReset() == nil || d <= 0 || d > time.Second {
				r.errorf("duration_until_reset %v, want within the second", st.GetDurationUntilReset())
			}
			// The counters survive the reload: they are in Redis, keyed by policy and rule.
			r.wantStatus(c.ask(t, "another", 1, desc("key3", v)), 0, rlsv3.RateLimitResponse_OVER_LIMIT, 10, rlsv3.RateLimitResponse_RateLimit_HOUR, 0)

			// Removing the policy removes the domain.
			writePolicies(t, cfg, conformancePolicies)
			sidecartest.Eventually(t, domainLimited(false))
		})
	})
}

// writePolicies renders the RateLimitPolicy manifests in yaml as `sluicectl render` does (one
// unnamed replica behind each policy) and replaces file with the result, atomically (a rename),
// as a reader must never see half a file.
func writePolicies(t *testing.T, file, yaml string) {
	t.Helper()
	policies, err := policyfile.Decode(strings.NewReader(yaml), "conformance.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, verdicts := render.Build("conformance", policies, render.FixedReplicas(1))
	for name, v := range verdicts {
		if v.Err != nil {
			t.Fatalf("policy %s is not accepted: %v", name, v.Err)
		}
	}
	b, err := policy.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
}

// rlsBin is the sluice-ratelimit binary the tests run, built once per test process.
var rlsBin = proc.Binary{Name: "sluice-ratelimit"}

func TestMain(m *testing.M) {
	code := m.Run()
	rlsBin.Remove()
	os.Exit(code)
}

// rlsProcess is one running sluice-ratelimit and a gRPC client of it.
type rlsProcess struct {
	admin  string
	client *rlsClient
}

// startRLS starts the binary on free loopback ports with the policies file cfg and Redis at
// redisURL, and waits until /readyz answers 200. The Redis budget is long: on a loaded machine
// a late Redis answer must not turn into a decision of another store. The file is re-read
// every 100ms besides file events, so a reload is quick.
func startRLS(t *testing.T, cfg, redisURL string) *rlsProcess {
	t.Helper()
	bin := rlsBin.Path(t)
	grpcAddr, admin := freeLoopback(t), freeLoopback(t)
	args := []string{"--grpc-listen", grpcAddr, "--metrics-listen", admin, "--config", cfg,
		"--redis-url", redisURL, "--redis-timeout", "30s", "--reload-interval", "100ms", "--log-level", "debug"}
	logFile, err := os.Create(filepath.Join(t.TempDir(), "sluice-ratelimit.log"))
	if err != nil {
		t.Fatal(err)
	}
	logs := func() string { b, _ := os.ReadFile(logFile.Name()); return string(b) }
	cmd := proc.Own(exec.Command(bin, args...))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = logFile.Close() // the child holds its own descriptor
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited //nolint:errcheck // killed: the exit status only says so
		if t.Failed() {
			t.Logf("sluice-ratelimit %s log:\n%s", strings.Join(args, " "), logs())
		}
	})
	sidecartest.Eventually(t, func() error {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("sluice-ratelimit exited before it was ready (%v):\n%s", err, logs())
		default:
		}
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &rlsProcess{admin: admin, client: &rlsClient{rlsv3.NewRateLimitServiceClient(conn)}}
}

// counter reads one sample of /metrics, 0 when absent.
func (p *rlsProcess) counter(t *testing.T, series string) int64 {
	t.Helper()
	resp, err := http.Get("http://" + p.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return int64(v)
}

type rlsClient struct{ rlsv3.RateLimitServiceClient }

// ask sends one ShouldRateLimit of domain with the request's hits_addend and descriptors,
// failing the test on an RPC error or an answer without one status per descriptor.
func (c *rlsClient) ask(t *testing.T, domain string, hits uint32, descs ...*rlsv3common.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), proc.Patience)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s %v): %v", domain, descs, err)
	}
	if len(resp.GetStatuses()) != len(descs) {
		t.Fatalf("ShouldRateLimit(%s %v): %d statuses for %d descriptors", domain, descs, len(resp.GetStatuses()), len(descs))
	}
	return resp
}

// desc is a descriptor of the entries key, value, key, value, ...
func desc(kv ...string) *rlsv3common.RateLimitDescriptor {
	d := &rlsv3common.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlsv3common.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// withHits sets d's own hits_addend.
func withHits(d *rlsv3common.RateLimitDescriptor, n uint64) *rlsv3common.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func wantCode(t *testing.T, resp *rlsv3.RateLimitResponse, code rlsv3.RateLimitResponse_Code) {
	t.Helper()
	if resp.GetOverallCode() != code {
		t.Errorf("overall_code %v, want %v (%v)", resp.GetOverallCode(), code, resp)
	}
}

// wantUnlimited checks that status i is OK without a current_limit, remaining or reset: no
// rule matched.
func wantUnlimited(t *testing.T, resp *rlsv3.RateLimitResponse, i int) {
	t.Helper()
	st := resp.GetStatuses()[i]
	if st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit() != nil || st.GetLimitRemaining() != 0 || st.GetDurationUntilReset() != nil {
		t.Errorf("status %d: %v, want OK without a limit", i, st)
	}
}

// statusError says how status i differs from code, limit per unit and remaining; "" when not.
func statusError(resp *rlsv3.RateLimitResponse, i int, code rlsv3.RateLimitResponse_Code, limit uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, remaining uint32) string {
	st := resp.GetStatuses()[i]
	cl := st.GetCurrentLimit()
	if st.GetCode() != code || cl.GetRequestsPerUnit() != limit || cl.GetUnit() != unit || cl.GetUnitMultiplier() != nil || st.GetLimitRemaining() != remaining {
		return fmt.Sprintf("status %d: %v %d/%v (multiplier %v) remaining %d, want %v %d/%v remaining %d",
			i, st.GetCode(), cl.GetRequestsPerUnit(), cl.GetUnit(), cl.GetUnitMultiplier(), st.GetLimitRemaining(), code, limit, unit, remaining)
	}
	return ""
}

func wantStatus(t *testing.T, resp *rlsv3.RateLimitResponse, i int, code rlsv3.RateLimitResponse_Code, limit uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, remaining uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
	t.Helper()
	if msg := statusError(resp, i, code, limit, unit, remaining); msg != "" {
		t.Error(msg)
	}
	return resp.GetStatuses()[i]
}

// wantResetWithin checks that an admitted status's duration_until_reset is set, positive and
// at most the window: a fixed window's end.
func wantResetWithin(t *testing.T, st *rlsv3.RateLimitResponse_DescriptorStatus, window time.Duration) {
	t.Helper()
	if st.GetDurationUntilReset() == nil {
		t.Errorf("no duration_until_reset: %v", st)
		return
	}
	if d := st.GetDurationUntilReset().AsDuration(); d <= 0 || d > window {
		t.Errorf("duration_until_reset %v, want in (0, %v]", d, window)
	}
}

// round is one attempt of a scenario whose requests must all fall in one fixed window of each
// rule: its failures are held until the attempt is known to have stayed in one window.
type round struct {
	attempt int
	errs    []string
	// ends are, per window length, the earliest and latest end of a window the answers
	// implied: the time an answer arrived plus its duration_until_reset.
	ends map[time.Duration][2]time.Time
}

// value is a descriptor value of this attempt's own: fresh counters.
func (r *round) value(name string) string {
	return fmt.Sprintf("%s-%d-%d", name, time.Now().UnixNano(), r.attempt)
}

func (r *round) errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// note records the window ends resp implies.
func (r *round) note(resp *rlsv3.RateLimitResponse) {
	now := time.Now()
	for _, st := range resp.GetStatuses() {
		w := unitLength(st.GetCurrentLimit())
		if w == 0 || st.GetDurationUntilReset() == nil {
			continue
		}
		end := now.Add(st.GetDurationUntilReset().AsDuration())
		e, ok := r.ends[w]
		if !ok {
			e = [2]time.Time{end, end}
		}
		if end.Before(e[0]) {
			e[0] = end
		}
		if end.After(e[1]) {
			e[1] = end
		}
		r.ends[w] = e
	}
}

// split reports whether the answers came from two windows of some rule: ends half a window
// apart or more (within one window they differ only by the answers' latencies).
func (r *round) split() bool {
	for w, e := range r.ends {
		if e[1].Sub(e[0]) >= w/2 {
			return true
		}
	}
	return false
}

func (r *round) wantOverall(resp *rlsv3.RateLimitResponse, code rlsv3.RateLimitResponse_Code) {
	r.note(resp)
	if resp.GetOverallCode() != code {
		r.errorf("overall_code %v, want %v (%v)", resp.GetOverallCode(), code, resp)
	}
}

func (r *round) wantStatus(resp *rlsv3.RateLimitResponse, i int, code rlsv3.RateLimitResponse_Code, limit uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, remaining uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
	r.note(resp)
	if msg := statusError(resp, i, code, limit, unit, remaining); msg != "" {
		r.errorf("%s", msg)
	}
	return resp.GetStatuses()[i]
}

// inOneWindow runs body until an attempt's answers all fall in one window of each rule they
// report, then fails t with that attempt's errors. A window's end (aligned to the epoch, as
// the peer's) can split an attempt on a loaded machine; it is then repeated with fresh
// descriptors, not judged.
func inOneWindow(t *testing.T, body func(r *round)) {
	t.Helper()
	for attempt := range 5 {
		r := &round{attempt: attempt, ends: map[time.Duration][2]time.Time{}}
		body(r)
		if r.split() {
			t.Logf("attempt %d spanned two windows (%v); repeating it", attempt, r.ends)
			continue
		}
		for _, e := range r.errs {
			t.Error(e)
		}
		return
	}
	t.Fatal("5 attempts each spanned two windows")
}

// unitLength is the window of a current_limit: its unit times its multiplier; 0 for UNKNOWN.
func unitLength(cl *rlsv3.RateLimitResponse_RateLimit) time.Duration {
	var d time.Duration
	switch cl.GetUnit() {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		d = time.Second
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		d = time.Minute
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		d = time.Hour
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		d = 24 * time.Hour
	default:
		return 0
	}
	if m := cl.GetUnitMultiplier(); m != nil {
		d *= time.Duration(m.GetValue())
	}
	return d
}

// freeLoopback is a free port on 127.0.0.1, as host:port.
func freeLoopback(t *testing.T) string {
	t.Helper()
	port, err := redisserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
