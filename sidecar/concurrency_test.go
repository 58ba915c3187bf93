package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// slowUpstream counts the requests in flight at the application and holds /slow requests
// (and streams /sse and /v1/chat/completions events) until open is called; /fast answers at
// once.
type slowUpstream struct {
	*httptest.Server
	inflight, max atomic.Int64
	mu            sync.Mutex
	gate          chan struct{}
}

// release lets the held requests finish and checks that the n whose codes arrive on codes were
// answered 200.
func (u *slowUpstream) release(t *testing.T, codes <-chan int, n int) {
	t.Helper()
	u.open()
	for range n {
		if c := <-codes; c != http.StatusOK {
			t.Fatalf("a held request answered %d", c)
		}
	}
}

// checkMax checks that the application saw at most, and at some point exactly, want requests
// at once.
func (u *slowUpstream) checkMax(t *testing.T, want int64) {
	t.Helper()
	if m := u.max.Load(); m != want {
		t.Errorf("the application saw %d requests at once, want %d", m, want)
	}
}

func newSlowUpstream(t *testing.T) *slowUpstream {
	u := &slowUpstream{gate: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := u.inflight.Add(1)
		defer u.inflight.Add(-1)
		for m := u.max.Load(); n > m && !u.max.CompareAndSwap(m, n); m = u.max.Load() {
		}
		u.mu.Lock()
		gate := u.gate
		u.mu.Unlock()
		switch r.URL.Path {
		case "/slow":
			select {
			case <-gate:
			case <-r.Context().Done():
			}
			_, _ = io.WriteString(w, "done")
		case "/ws": // an Upgrade tunnel echoing until the client closes it
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			_ = brw.Flush()
			_, _ = io.Copy(c, brw)
		case "/sse", "/v1/chat/completions": // a streamed completion
			w.Header().Set("Content-Type", "text/event-stream")
			for {
				_, _ = io.WriteString(w, "data: tick\n\n")
				w.(http.Flusher).Flush()
				select {
				case <-gate:
					return
				case <-r.Context().Done():
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		default:
			_, _ = io.WriteString(w, "ok")
		}
	}))
	t.Cleanup(u.Close)
	return u
}

// open lets the held requests finish; later ones are held again.
func (u *slowUpstream) open() {
	u.mu.Lock()
	close(u.gate)
	u.gate = make(chan struct{})
	u.mu.Unlock()
}

// waitInflight waits until the application has n requests in flight.
func (u *slowUpstream) waitInflight(t *testing.T, n int64) {
	t.Helper()
	st.Eventually(t, func() error {
		if got := u.inflight.Load(); got != n {
			return fmt.Errorf("%d requests in flight at the application, want %d", got, n)
		}
		return nil
	})
}

// concDoc is a policy of pods a and b (two replicas) with a Concurrency rule "streams" of
// limit slots per X-API-Key whose holdings expire after expiry, and the rules more.
func concDoc(t *testing.T, limit int64, expiry time.Duration, more ...policy.Rule) []byte {
	rules := append([]policy.Rule{{
		Name: "streams", Key: []policy.KeyPart{{Source: policy.SourceHeader, Name: "X-Api-Key"}},
		Algorithm: "Concurrency", Limit: limit, WindowMs: expiry.Milliseconds(), Cost: 1, Mode: "Enforce",
	}}, more...)
	return st.Doc(t, st.Policy("llm", rules, func(p *policy.Policy) {
		p.Selector.MatchLabels = map[string]string{"app": "conc"}
		p.Pods, p.Replicas = []string{"a", "b"}, 2
		p.Response.Headers = "Draft"
	}))
}

// twoSidecars starts pods a and b in front of up with concDoc's limit of 5 slots, deciding
// with the Redis at url within timeout.
func twoSidecars(t *testing.T, up *slowUpstream, url, timeout string) []*sidecar {
	doc := concDoc(t, 5, 30*time.Second)
	return []*sidecar{
		startSidecarDoc(t, up.URL, doc, "app=conc", url, "--pod-name", "a", "--redis-timeout", timeout),
		startSidecarDoc(t, up.URL, doc, "app=conc", url, "--pod-name", "b", "--redis-timeout", timeout),
	}
}

// get sends GET path with X-API-Key: key to s and returns the status and response.
func get(t *testing.T, s *sidecar, path, key string) (int, http.Header, string) {
	req, _ := http.NewRequest("GET", s.URL()+path, nil)
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// slotsHeld reads s's sluice_concurrency_slots_held of rule streams.
func slotsHeld(t *testing.T, s *sidecar) int {
	m := regexp.MustCompile(`(?m)^sluice_concurrency_slots_held\{policy="llm",rule="streams"\} (\d+)$`).FindStringSubmatch(scrape(t, "http://"+s.Admin+"/metrics"))
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func waitSlots(t *testing.T, s *sidecar, n int) {
	t.Helper()
	st.Eventually(t, func() error {
		if got := slotsHeld(t, s); got != n {
			return fmt.Errorf("sidecar holds %d slots, want %d", got, n)
		}
		return nil
	})
}

// TestConcurrencyAcrossSidecars: two sidecars share a limit of 5 requests in flight per key
// through Redis. 20 concurrent requests for one key to a slow application: exactly 5 reach
// it, the other 15 get 429 with the draft headers' concurrent-requests unit and Retry-After
// 1; once those 5 finish, the next 5 pass, and the application never sees more than 5 at once.
func TestConcurrencyAcrossSidecars(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	up := newSlowUpstream(t)
	r := redisserver.StartTest(t)
	sc := twoSidecars(t, up, r.URL(), "1s")
	type answer struct {
		code int
		hdr  http.Header
	}
	for round := range 2 {
		answers := make(chan answer, 20)
		for i := range 20 {
			go func() {
				code, hdr, _ := get(t, sc[i%2], "/slow", "key-1")
				answers <- answer{code, hdr}
			}()
		}
		for range 15 { // the denials come back while the 5 admitted are held
			a := <-answers
			if a.code != http.StatusTooManyRequests {
				t.Fatalf("round %d: %d before the held requests finished, want 429", round, a.code)
			}
			if p := a.hdr.Get("RateLimit-Policy"); p != `"streams";q=5;qu="concurrent-requests"` {
				t.Errorf("RateLimit-Policy %q", p)
			}
			if a.hdr.Get("Retry-After") != "1" || a.hdr.Get("RateLimit") != `"streams";r=0` {
				t.Errorf("Retry-After %q, RateLimit %q", a.hdr.Get("Retry-After"), a.hdr.Get("RateLimit"))
			}
		}
		up.waitInflight(t, 5)
		if n := slotsHeld(t, sc[0]) + slotsHeld(t, sc[1]); n != 5 {
			t.Errorf("the sidecars hold %d slots, want 5", n)
		}
		up.open()
		for range 5 {
			if a := <-answers; a.code != http.StatusOK {
				t.Fatalf("round %d: a held request answered %d", round, a.code)
			}
		}
		waitSlots(t, sc[0], 0)
		waitSlots(t, sc[1], 0)
	}
	up.checkMax(t, 5)
}

// TestConcurrencyStreamsHoldTheirSlot: an event stream holds its slot until it ends, and a
// client that goes away mid-stream frees it.
func TestConcurrencyStreamsHoldTheirSlot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	up := newSlowUpstream(t)
	r := redisserver.StartTest(t)
	s := startSidecarDoc(t, up.URL, concDoc(t, 1, 30*time.Second), "app=conc", r.URL(), "--pod-name", "a", "--redis-timeout", "1s")
	stream := func() (*http.Response, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", s.URL()+"/sse", nil)
		req.Header.Set("X-API-Key", "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("stream: %v, %v", resp, err)
		}
		buf := make([]byte, 5)
		if _, err := io.ReadFull(resp.Body, buf); err != nil { // the stream is running
			t.Fatal(err)
		}
		return resp, cancel
	}
	resp, cancel := stream()
	if code, _, _ := get(t, s, "/fast", "k"); code != http.StatusTooManyRequests {
		t.Fatalf("a request beside a running stream: %d, want 429", code)
	}
	up.open() // the application ends the stream
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	cancel()
	waitSlots(t, s, 0)

	resp, cancel = stream()
	if code, _, _ := get(t, s, "/fast", "k"); code != http.StatusTooManyRequests {
		t.Fatalf("a request beside a running stream: %d, want 429", code)
	}
	cancel() // the client goes away mid-stream
	resp.Body.Close()
	waitSlots(t, s, 0)
	if code, _, _ := get(t, s, "/fast", "k"); code != http.StatusOK {
		t.Fatalf("after the client left: %d, want 200", code)
	}
	up.open()
}

// TestConcurrencyTunnelHoldsItsSlot: an Upgrade (WebSocket) tunnel holds its slot until the
// client closes it.
func TestConcurrencyTunnelHoldsItsSlot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	up := newSlowUpstream(t)
	r := redisserver.StartTest(t)
	s := startSidecarDoc(t, up.URL, concDoc(t, 1, 30*time.Second), "app=conc", r.URL(), "--pod-name", "a", "--redis-timeout", "1s")
	c, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nX-API-Key: k\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v, %v", resp, err)
	}
	_, _ = io.WriteString(c, "ping")
	if b := make([]byte, 4); func() bool { _, err := io.ReadFull(br, b); return err != nil || string(b) != "ping" }() {
		t.Fatal("the tunnel does not echo")
	}
	waitSlots(t, s, 1)
	if code, _, _ := get(t, s, "/fast", "k"); code != http.StatusTooManyRequests {
		t.Fatalf("a request beside an open tunnel: %d, want 429", code)
	}
	c.Close()
	waitSlots(t, s, 0)
	if code, _, _ := get(t, s, "/fast", "k"); code != http.StatusOK {
		t.Fatalf("after the tunnel closed: %d, want 200", code)
	}
}

// TestConcurrencyKilledSidecarsSlotsExpire: a sidecar SIGKILLed while it holds 3 of 5 slots.
// Right after, Redis still holds them, each expiring at most the rule's expiry (3 s) after
// Redis's clock, and the other sidecar gets only the 2 left; it gets the 3 once Redis's clock
// has passed their expiry, and never before.
func TestConcurrencyKilledSidecarsSlotsExpire(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	const expiry = 3 * time.Second
	up := newSlowUpstream(t)
	doc := concDoc(t, 5, expiry)
	r := redisserver.StartTest(t)
	a := startSidecarDoc(t, up.URL, doc, "app=conc", r.URL(), "--pod-name", "a", "--redis-timeout", "1s")
	b := startSidecarDoc(t, up.URL, doc, "app=conc", r.URL(), "--pod-name", "b", "--redis-timeout", "1s")
	for range 3 {
		go func() { // its sidecar is killed: the request fails
			req, _ := http.NewRequest("GET", a.URL()+"/slow", nil)
			req.Header.Set("X-API-Key", "k")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	waitSlots(t, a, 3)
	if err := a.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = a.cmd.Wait()

	ro, err := redis.ParseURL(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(ro)
	defer rc.Close()
	ctx := context.Background()
	keys, err := rc.Keys(ctx, "sluice:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v, %v: want the one Concurrency key", keys, err)
	}
	held, err := rc.ZRangeWithScores(ctx, keys[0], 0, -1).Result()
	if err != nil || len(held) != 3 {
		t.Fatalf("holdings right after the kill: %v, %v, want 3", held, err)
	}
	redisNow := func() int64 {
		tm, err := rc.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	first, last := int64(held[0].Score), int64(held[2].Score)
	if now := redisNow(); first <= now || last > now+expiry.Milliseconds() {
		t.Fatalf("holdings expire at %v, Redis's clock %d: want within (now, now+%s]", held, now, expiry)
	}
	waiting := make(chan int, 2)
	for range 2 {
		go func() { c, _, _ := get(t, b, "/slow", "k"); waiting <- c }()
	}
	waitSlots(t, b, 2)
	deadline := time.Now().Add(proc.Patience)
	for {
		before := redisNow()
		code, _, _ := get(t, b, "/fast", "k")
		after := redisNow()
		if code == http.StatusOK {
			if after < first {
				t.Fatalf("admitted at Redis time <= %d, before the killed sidecar's first holding expired (%d)", after, first)
			}
			break
		}
		if before >= last {
			t.Fatalf("denied at Redis time >= %d, after every holding of the killed sidecar expired (%d)", before, last)
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed sidecar's slots were never freed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	up.open()
	for range 2 {
		if c := <-waiting; c != http.StatusOK {
			t.Fatalf("a held request answered %d", c)
		}
	}
}

// TestConcurrencyWithARateRule: a request a rate rule denies takes no slot, and one denied
// for lack of a slot charges no rate.
func TestConcurrencyWithARateRule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	up := newSlowUpstream(t)
	rate := st.Rule("rate", 3, time.Hour, func(r *policy.Rule) {
		r.Algorithm, r.Burst = "FixedWindow", 0
		r.Key = []policy.KeyPart{{Source: policy.SourceHeader, Name: "X-Api-Key"}}
	})
	r := redisserver.StartTest(t)
	s := startSidecarDoc(t, up.URL, concDoc(t, 2, 30*time.Second, rate), "app=conc", r.URL(), "--pod-name", "a", "--redis-timeout", "1s")
	done := make(chan int, 3)
	for range 2 {
		go func() { c, _, _ := get(t, s, "/slow", "k"); done <- c }()
	}
	waitSlots(t, s, 2)
	if code, _, body := get(t, s, "/fast", "k"); code != http.StatusTooManyRequests || !strings.Contains(body, `"rule":"streams"`) {
		t.Fatalf("a third request in flight: %d %s, want 429 by streams", code, body)
	}
	up.open()
	<-done
	<-done
	waitSlots(t, s, 0)
	go func() { c, _, _ := get(t, s, "/slow", "k"); done <- c }() // the rate's 3rd unit: the denial above charged none
	waitSlots(t, s, 1)
	if code, _, body := get(t, s, "/fast", "k"); code != http.StatusTooManyRequests || !strings.Contains(body, `"rule":"rate"`) {
		t.Fatalf("a 4th request: %d %s, want 429 by rate", code, body)
	}
	if n := slotsHeld(t, s); n != 1 {
		t.Fatalf("%d slots held after the rate denied a request, want 1", n)
	}
	up.open()
	if c := <-done; c != http.StatusOK {
		t.Fatalf("the 3rd request: %d", c)
	}
}

// TestConcurrencyLocalShares: with Redis gone, each sidecar admits its share of the limit
// (pod a 3, pod b 2 of 5), so the application sees 5 at once, never more.
func TestConcurrencyLocalShares(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	up := newSlowUpstream(t)
	r := redisserver.StartTest(t)
	sc := twoSidecars(t, up, r.URL(), "50ms")
	r.Kill()
	codes := make(chan int, 20)
	for i := range 20 {
		go func() { c, _, _ := get(t, sc[i%2], "/slow", "k"); codes <- c }()
	}
	for range 15 {
		if c := <-codes; c != http.StatusTooManyRequests {
			t.Fatalf("%d before the held requests finished, want 429", c)
		}
	}
	up.waitInflight(t, 5)
	if a, b := slotsHeld(t, sc[0]), slotsHeld(t, sc[1]); a != 3 || b != 2 {
		t.Errorf("pods hold %d and %d slots, want their shares 3 and 2", a, b)
	}
	up.release(t, codes, 5)
	up.checkMax(t, 5)
}

// TestConcurrencyRedisKilledMidLoad: Redis is killed while pod a holds 2 slots it took there.
// With Redis gone the pods keep to their shares (a 3, its 2 included, b 2), so the
// application sees 5 at once, never more. Redis comes back empty: the sidecars make every
// slot still held known to it again (the 2 taken before the outage as well as the 3 taken
// locally), so it denies a sixth; once the requests end it holds nothing (no slot leaked),
// and it admits exactly 5 again (none released twice).
func TestConcurrencyRedisKilledMidLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	up := newSlowUpstream(t)
	r := redisserver.StartTest(t)
	sc := twoSidecars(t, up, r.URL(), "200ms")
	a, b := sc[0], sc[1]
	ro, err := redis.ParseURL(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(ro)
	defer rc.Close()
	// held is the number of holdings Redis has for the policy's one Concurrency key.
	held := func() (int64, error) {
		ks, err := rc.Keys(context.Background(), "sluice:*").Result()
		if err != nil || len(ks) == 0 {
			return 0, err
		}
		if len(ks) != 1 {
			return 0, fmt.Errorf("keys %v: want the one Concurrency key", ks)
		}
		return rc.ZCard(context.Background(), ks[0]).Result()
	}
	waitHeld := func(n int64) {
		t.Helper()
		st.Eventually(t, func() error {
			got, err := held()
			if err != nil {
				return err
			}
			if got != n {
				return fmt.Errorf("Redis holds %d slots, want %d", got, n)
			}
			return nil
		})
	}
	codes := make(chan int, 20)
	send := func(s *sidecar, n int) {
		for range n {
			go func() { c, _, _ := get(t, s, "/slow", "k"); codes <- c }()
		}
	}
	send(a, 2)
	up.waitInflight(t, 2)
	waitHeld(2)

	r.Kill()
	send(a, 5)
	send(b, 5)
	for range 7 { // a admits 1 beside its 2, b admits 2
		if c := <-codes; c != http.StatusTooManyRequests {
			t.Fatalf("%d with Redis gone and the shares full, want 429", c)
		}
	}
	up.waitInflight(t, 5)
	waitSlots(t, a, 3)
	waitSlots(t, b, 2)

	r.Restart()
	waitHeld(5)
	if c, _, body := get(t, b, "/fast", "k"); c != http.StatusTooManyRequests {
		t.Fatalf("a sixth request after Redis came back: %d %s, want 429", c, body)
	}
	up.release(t, codes, 5)
	waitSlots(t, a, 0)
	waitSlots(t, b, 0)
	waitHeld(0)

	// Every pod decides in Redis again (its breaker closed): exactly 5 of 6 are admitted.
	st.Eventually(t, func() error {
		if c, _, _ := get(t, a, "/fast", "k"); c != http.StatusOK {
			return fmt.Errorf("pod a answers %d", c)
		}
		return nil
	})
	send(a, 3)
	send(b, 3)
	if c := <-codes; c != http.StatusTooManyRequests {
		t.Fatalf("%d: want one of 6 denied", c)
	}
	up.waitInflight(t, 5)
	waitHeld(5)
	up.release(t, codes, 5)
	up.checkMax(t, 5)
}

// config/samples/llm-concurrent-streams.yaml promises each API key 4 concurrent streams:
// rendered as the controller renders it, through the sidecar, a key's fifth concurrent
// completion gets 429 with the concurrent-requests unit and Retry-After 1 while another key's
// passes, and once the streams end the key streams again.
func TestLLMConcurrentStreamsSample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	data := renderedSample(t, "llm-concurrent-streams.yaml")
	up := newSlowUpstream(t)
	r := redisserver.StartTest(t)
	s := startSidecarDoc(t, up.URL, data, "app=llm-gateway", r.URL())
	// stream starts a completion for key and returns its response once the first event came.
	stream := func(key string) (*http.Response, context.CancelFunc) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", s.URL()+"/v1/chat/completions", nil)
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			if _, err := io.ReadFull(resp.Body, make([]byte, 5)); err != nil {
				t.Fatal(err)
			}
		}
		return resp, cancel
	}
	var open []*http.Response
	for i := range 4 {
		resp, cancel := stream("sk-1")
		defer cancel()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d of sk-1: %d, want 200", i+1, resp.StatusCode)
		}
		open = append(open, resp)
	}
	resp, cancel := stream("sk-1")
	resp.Body.Close()
	cancel()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(resp.Header.Get("RateLimit-Policy"), `"streams-per-key";q=4;qu="concurrent-requests"`) {
		t.Fatalf("a 5th stream of sk-1: %d, Retry-After %q, RateLimit-Policy %q", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("RateLimit-Policy"))
	}
	other, cancelOther := stream("sk-2")
	defer cancelOther()
	if other.StatusCode != http.StatusOK {
		t.Fatalf("a stream of sk-2 beside sk-1's 4: %d, want 200", other.StatusCode)
	}
	up.open() // every stream ends
	for _, r := range append(open, other) {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	up.waitInflight(t, 0)
	st.Eventually(t, func() error {
		resp, cancel := stream("sk-1")
		defer cancel()
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("sk-1 after its streams ended: %d", resp.StatusCode)
		}
		return nil
	})
	up.open()
}
