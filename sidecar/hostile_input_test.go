package main

// Hostile input at the sidecar's listener gets a clear 4xx and never reaches the application
// (issue 12). The application is a raw TCP upstream that records every request it parses.

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
)

// smuggled is the request a desynchronised parser would see in the body.
const smuggled = "GET /smuggled HTTP/1.1\r\nHost: app\r\n\r\n"

// smugglingCases are requests whose framing is ambiguous: a proxy that forwards them lets the
// proxy and the application disagree on where the next request starts. Each is also a seed of
// FuzzListener. codes are the acceptable answers: 400, or 501 where the request names a
// transfer coding the server does not implement (RFC 9112 6.1 recommends 501 there).
var smugglingCases = []struct {
	name, req string
	codes     []int
}{
	{"content-length-and-chunked", "POST /cl-te HTTP/1.1\r\nHost: app\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, []int{400}},
	{"chunked-and-content-length", "POST /te-cl HTTP/1.1\r\nHost: app\r\nTransfer-Encoding: chunked\r\nContent-Length: 43\r\n\r\n0\r\n\r\n" + smuggled, []int{400}},
	{"two-content-lengths", "POST /cl-cl HTTP/1.1\r\nHost: app\r\nContent-Length: 0\r\nContent-Length: 38\r\n\r\n" + smuggled, []int{400}},
	{"content-length-list", "POST /cl-list HTTP/1.1\r\nHost: app\r\nContent-Length: 0, 38\r\n\r\n" + smuggled, []int{400}},
	{"content-length-signed", "POST /cl-sign HTTP/1.1\r\nHost: app\r\nContent-Length: +0\r\n\r\n" + smuggled, []int{400}},
	{"content-length-hex", "POST /cl-hex HTTP/1.1\r\nHost: app\r\nContent-Length: 0x0\r\n\r\n" + smuggled, []int{400}},
	{"transfer-encoding-xchunked", "POST /te-x HTTP/1.1\r\nHost: app\r\nTransfer-Encoding: xchunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + smuggled, []int{400, 501}},
	{"transfer-encoding-chunked-identity", "POST /te-ci HTTP/1.1\r\nHost: app\r\nTransfer-Encoding: chunked, identity\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + smuggled, []int{400, 501}},
	{"transfer-encoding-identity-chunked", "POST /te-ic HTTP/1.1\r\nHost: app\r\nTransfer-Encoding: identity, chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + smuggled, []int{400, 501}},
	{"transfer-encoding-two-lines", "POST /te-2 HTTP/1.1\r\nHost: app\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n" + smuggled, []int{400, 501}},
	{"transfer-encoding-quoted", "POST /te-q HTTP/1.1\r\nHost: app\r\nTransfer-Encoding: \"chunked\"\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + smuggled, []int{400, 501}},
	{"transfer-encoding-vertical-tab", "POST /te-vt HTTP/1.1\r\nHost: app\r\nTransfer-Encoding:\x0bchunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + smuggled, []int{400, 501}},
	{"transfer-encoding-space-before-colon", "POST /te-sp HTTP/1.1\r\nHost: app\r\nTransfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + smuggled, []int{400}},
	{"transfer-encoding-folded", "POST /te-fold HTTP/1.1\r\nHost: app\r\nContent-Length: 5\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n" + smuggled, []int{400}},
	{"transfer-encoding-leading-space-value", "POST /te-lsp HTTP/1.1\r\nHost: app\r\nContent-Length: 5\r\nTransfer-Encoding:  chunked\r\n\r\n0\r\n\r\n" + smuggled, []int{400}},
}

// invalidRequestLines are start lines and headers that are not HTTP/1.1.
var invalidRequestLines = []struct{ name, req string }{
	{"method-with-parenthesis", "GE(T /bad-method HTTP/1.1\r\nHost: app\r\n\r\n"},
	{"method-with-del", "GE\x7fT /bad-method HTTP/1.1\r\nHost: app\r\n\r\n"},
	{"method-with-nul", "G\x00ET /bad-method HTTP/1.1\r\nHost: app\r\n\r\n"},
	{"method-with-comma", "GET,POST /bad-method HTTP/1.1\r\nHost: app\r\n\r\n"},
	{"empty-method", " /bad-method HTTP/1.1\r\nHost: app\r\n\r\n"},
	{"space-in-target", "GET /bad target HTTP/1.1\r\nHost: app\r\n\r\n"},
	{"missing-host", "GET /no-host HTTP/1.1\r\n\r\n"},
	{"two-hosts", "GET /two-hosts HTTP/1.1\r\nHost: app\r\nHost: other\r\n\r\n"},
	{"header-name-with-space", "GET /bad-name HTTP/1.1\r\nHost: app\r\nBad Name: x\r\n\r\n"},
	{"header-without-colon", "GET /no-colon HTTP/1.1\r\nHost: app\r\nNoColon\r\n\r\n"},
}

// rejectsAndCloses sends req on a fresh connection and checks that the answer is one of codes
// and that the sidecar then closes the connection (what follows a request it cannot frame is
// not a request). It returns the status.
func rejectsAndCloses(t *testing.T, sc *sidecar, req string, codes []int) int {
	t.Helper()
	c := dialRaw(t, sc.Addr)
	c.send(t, req)
	resp, head, body := c.response(t, http.MethodGet)
	if !slices.Contains(codes, resp.StatusCode) {
		t.Errorf("answered %d, want one of %v\n%s%s", resp.StatusCode, codes, head, body)
	}
	if rest, err := c.closedByPeer(proc.Patience); err != nil {
		t.Errorf("after the %d: %v", resp.StatusCode, err)
	} else if len(rest) > 0 {
		t.Errorf("after the %d the sidecar sent %q", resp.StatusCode, rest)
	}
	return resp.StatusCode
}

// reachedNothing sends a canary request and, once it arrived, fails t if the application
// received anything else, or anything malformed, since mark (upstream.mark before the hostile
// request): the canary orders the check after every request the hostile connection could have
// produced.
func reachedNothing(t *testing.T, sc *sidecar, up *rawUpstream, mark [2]int) {
	t.Helper()
	c := dialRaw(t, sc.Addr)
	c.send(t, "GET /canary HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n")
	if resp, _, _ := c.response(t, http.MethodGet); resp.StatusCode != 200 {
		t.Fatalf("canary answered %d", resp.StatusCode)
	}
	reqs := up.Requests()[mark[0]:]
	if len(reqs) == 0 {
		t.Fatalf("the canary did not reach the upstream")
	}
	for _, r := range reqs {
		if r.Req.URL.Path != "/canary" {
			t.Errorf("the application received %s %s:\n%s", r.Req.Method, r.Req.URL, r.Head)
		}
	}
	if p := up.Problems()[mark[1]:]; len(p) > 0 {
		t.Errorf("the application received malformed requests: %q", p)
	}
}

// TestSmugglingRejected sends each ambiguous framing and checks the 4xx, the closed connection
// and that nothing reached the application.
func TestSmugglingRejected(t *testing.T) {
	up := newRawUpstream(t, nil)
	sc := startSidecar(t, up.URL())
	for _, tc := range smugglingCases {
		t.Run(tc.name, func(t *testing.T) {
			mark := up.mark()
			code := rejectsAndCloses(t, sc, tc.req, tc.codes)
			t.Logf("answered %d", code)
			reachedNothing(t, sc, up, mark)
		})
	}
}

// TestInvalidRequestLinesRejected: invalid methods, targets, a missing or doubled Host and
// malformed header lines get 400 and never reach the application.
func TestInvalidRequestLinesRejected(t *testing.T) {
	up := newRawUpstream(t, nil)
	sc := startSidecar(t, up.URL())
	for _, tc := range invalidRequestLines {
		t.Run(tc.name, func(t *testing.T) {
			mark := up.mark()
			rejectsAndCloses(t, sc, tc.req, []int{400})
			reachedNothing(t, sc, up, mark)
		})
	}
}

// sendBig writes a request whose headers or target are over the limit while the answer is
// read: the sidecar may answer and close before reading it all.
func sendBig(t *testing.T, sc *sidecar, req string) int {
	t.Helper()
	c := dialRaw(t, sc.Addr)
	go func() { _, _ = c.Write([]byte(req)) }()
	resp, head, body := c.response(t, http.MethodGet)
	if resp.StatusCode < 400 || resp.StatusCode > 499 {
		t.Errorf("answered %d, want a 4xx\n%s%s", resp.StatusCode, head, body)
	}
	return resp.StatusCode
}

// TestHeaderLimits: headers over the limit get 431 and a request line over it a 4xx (414 is
// the precise code; net/http answers 431 because it counts the line in the header limit),
// both with the default limit (64 KiB, inject.DefaultMaxHeaderBytes) and with --max-header-bytes, and nothing reaches the
// application; a request under the limit passes.
func TestHeaderLimits(t *testing.T) {
	bigHeader := func(n int) string {
		return "GET /big-header HTTP/1.1\r\nHost: app\r\nX-Big: " + strings.Repeat("b", n) + "\r\n\r\n"
	}
	bigLine := func(n int) string {
		return "GET /big-line?" + strings.Repeat("q", n) + " HTTP/1.1\r\nHost: app\r\n\r\n"
	}
	check := func(t *testing.T, extra []string, over, under int) {
		up := newRawUpstream(t, nil)
		sc := startSidecar(t, up.URL(), extra...)
		t.Run("headers-over", func(t *testing.T) {
			mark := up.mark()
			if code := sendBig(t, sc, bigHeader(over)); code != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("headers of %d bytes answered %d, want 431", over, code)
			}
			reachedNothing(t, sc, up, mark)
		})
		t.Run("request-line-over", func(t *testing.T) {
			mark := up.mark()
			t.Logf("a request line of %d bytes answered %d", over, sendBig(t, sc, bigLine(over)))
			reachedNothing(t, sc, up, mark)
		})
		t.Run("headers-under", func(t *testing.T) {
			c := dialRaw(t, sc.Addr)
			c.send(t, bigHeader(under))
			if resp, _, _ := c.response(t, http.MethodGet); resp.StatusCode != 200 {
				t.Errorf("headers of %d bytes answered %d, want 200", under, resp.StatusCode)
			}
		})
	}
	t.Run("default", func(t *testing.T) { check(t, nil, 2<<20, 48<<10) })
	t.Run("max-header-bytes-flag", func(t *testing.T) { check(t, []string{"--max-header-bytes", "8192"}, 32<<10, 4<<10) })
}

// TestSlowClients: with --read-header-timeout and --idle-timeout at 300ms, a client that
// stops in the middle of its headers, and a client that stays idle after a response, are
// disconnected, and the unfinished request never reaches the application. The property is
// about time, so the test's bound is the sidecar's own: the connection must close before half
// the default (10 s and 120 s) would have closed it, which tells the flag from the default
// however slow the machine.
func TestSlowClients(t *testing.T) {
	up := newRawUpstream(t, nil)
	sc := startSidecar(t, up.URL(), "--read-header-timeout", "300ms", "--idle-timeout", "300ms")
	t.Run("read-header-timeout", func(t *testing.T) {
		mark := up.mark()
		c := dialRaw(t, sc.Addr)
		c.send(t, "GET /slow-headers HTTP/1.1\r\nHost: app\r\nX-Part: ")
		rest, err := c.closedByPeer(inject.DefaultReadHeaderTimeout / 2)
		if err != nil {
			t.Error(err)
		}
		if len(rest) > 0 && !strings.HasPrefix(string(rest), "HTTP/1.1 4") {
			t.Errorf("the sidecar answered a request it never received in full: %q", rest)
		}
		reachedNothing(t, sc, up, mark)
	})
	t.Run("idle-timeout", func(t *testing.T) {
		c := dialRaw(t, sc.Addr)
		c.send(t, "GET /then-idle HTTP/1.1\r\nHost: app\r\n\r\n")
		if resp, _, _ := c.response(t, http.MethodGet); resp.StatusCode != 200 {
			t.Fatalf("answered %d", resp.StatusCode)
		}
		if rest, err := c.closedByPeer(inject.DefaultIdleTimeout / 2); err != nil || len(rest) > 0 {
			t.Errorf("idle connection: %v %q", err, rest)
		}
	})
}
