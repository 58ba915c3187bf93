package main

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/proc"
)

// FuzzListener drives raw bytes at the sidecar's listener and checks that the application,
// a raw TCP upstream parsing what it receives with net/http's ReadRequest, only ever sees
// well-formed requests with one unambiguous framing (see rawUpstream for what counts as a
// problem). The seeds (the smuggling and invalid request cases, and valid requests of every
// shape) run in plain `go test`; `go test -fuzz FuzzListener ./sidecar/` explores from them.
// One sidecar serves the whole run of each fuzzing process.
func FuzzListener(f *testing.F) {
	for _, tc := range smugglingCases {
		f.Add([]byte(tc.req))
	}
	for _, tc := range invalidRequestLines {
		f.Add([]byte(tc.req))
	}
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: app\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: app\r\n\r\nGET /b HTTP/1.1\r\nHost: app\r\n\r\n",
		"POST /cl HTTP/1.1\r\nHost: app\r\nContent-Length: 5\r\n\r\nhello",
		"POST /chunked HTTP/1.1\r\nHost: app\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n",
		"POST /short HTTP/1.1\r\nHost: app\r\nContent-Length: 100\r\n\r\nshort",
		"POST /expect HTTP/1.1\r\nHost: app\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\nok",
		"GET /upgrade HTTP/1.1\r\nHost: app\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nbytes after",
		"GET /hop HTTP/1.1\r\nHost: app\r\nConnection: X-A, close\r\nX-A: 1\r\nKeep-Alive: 5\r\nTE: trailers\r\n\r\n",
		"GET http://other.example/absolute HTTP/1.1\r\nHost: app\r\n\r\n",
		"GET /http10 HTTP/1.0\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: app\r\n\r\n",
		"CONNECT app:443 HTTP/1.1\r\nHost: app:443\r\n\r\n",
		"GET /lf HTTP/1.1\nHost: app\n\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}

	up := newRawUpstream(f, nil)
	sc := startSidecar(f, up.URL())
	reported := 0
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := net.Dial("tcp", sc.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// A hung exchange is not this test's finding; the deadline keeps each input cheap.
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		go func() {
			_, _ = c.Write(in)
			_ = c.(*net.TCPConn).CloseWrite()
		}()
		_, _ = io.Copy(io.Discard, c)
		// The upstream records a problem before it answers or closes, so whatever this input
		// caused is recorded by the time the sidecar has answered and closed.
		if p := up.Problems(); len(p) > reported {
			reported = len(p)
			t.Fatalf("input %q reached the application malformed:\n%s", in, strings.Join(p[len(p)-1:], "\n"))
		}
	})
}

// TestRawUpstreamFlagsAmbiguousFraming shows that FuzzListener's oracle can fail: sent
// straight to the raw upstream, requests a proxy must never forward are recorded as problems,
// and a well-formed one is not.
func TestRawUpstreamFlagsAmbiguousFraming(t *testing.T) {
	for name, tc := range map[string]struct {
		req     string
		problem bool
	}{
		"well-formed":             {"POST / HTTP/1.1\r\nHost: app\r\nContent-Length: 2\r\n\r\nok", false},
		"chunked":                 {"POST / HTTP/1.1\r\nHost: app\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", false},
		"content-length-and-te":   {smugglingCases[0].req, true},
		"two-content-lengths":     {"POST / HTTP/1.1\r\nHost: app\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", true},
		"transfer-encoding-other": {"POST / HTTP/1.1\r\nHost: app\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", true},
		"unparseable":             {"GE(T / HTTP/1.1\r\nHost: app\r\n\r\n", true},
		"malformed-chunk":         {"POST / HTTP/1.1\r\nHost: app\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", true},
	} {
		t.Run(name, func(t *testing.T) {
			up := newRawUpstream(t, nil)
			c := dialRaw(t, up.ln.Addr().String())
			c.send(t, tc.req)
			_ = c.Conn.(*net.TCPConn).CloseWrite()
			if _, err := c.closedByPeer(proc.Patience); err != nil {
				t.Fatal(err)
			}
			if got := len(up.Problems()) > 0; got != tc.problem {
				t.Errorf("problem recorded: %v, want %v (%q)", got, tc.problem, up.Problems())
			}
		})
	}
}
