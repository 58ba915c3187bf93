package main

// Black-box HTTP behaviour of the built sidecar: what any proxy core must keep (issue 12).

import (
	"bufio"
	"context"
	"crypto/sha1" //nolint:gosec // RFC 6455's Sec-WebSocket-Accept is defined with SHA-1
	"encoding/base64"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clients are the two protocols a client may speak to the sidecar: HTTP/1.1 and h2c (HTTP/2
// with prior knowledge).
func clients() map[string]*http.Client {
	return map[string]*http.Client{
		"http1": {Transport: &http.Transport{}},
		"h2c":   {Transport: &http.Transport{Protocols: h2cProtocols()}},
	}
}

// TestKeepAliveBothSides sends sequential requests over one client connection and checks that
// they reach the application over one upstream connection: the sidecar keeps both sides alive.
func TestKeepAliveBothSides(t *testing.T) {
	var mu sync.Mutex
	active := map[net.Conn]bool{} // upstream connections that carried a request
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello")
	}))
	up.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateActive {
			mu.Lock()
			active[c] = true
			mu.Unlock()
		}
	}
	up.Start()
	defer up.Close()
	sc := startSidecar(t, up.URL)

	var dials atomic.Int32
	client := &http.Client{Transport: &http.Transport{
		MaxConnsPerHost: 1,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
	for i := range 20 {
		resp, err := client.Get(sc.URL() + "/ka/" + strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "hello" || resp.Close {
			t.Fatalf("request %d: %d %q close=%v", i, resp.StatusCode, b, resp.Close)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n := dials.Load(); n != 1 {
		t.Errorf("the client dialled %d connections for 20 sequential requests, want 1 (client side not kept alive)", n)
	}
	if len(active) != 1 {
		t.Errorf("the upstream served 20 sequential requests over %d connections, want 1 (upstream side not kept alive)", len(active))
	}
}

// patternBlock is repeated to make the bodies. Its length is prime, so that a lost,
// repeated or reordered buffer of any power-of-two size changes the checksum.
var patternBlock = func() []byte {
	b := make([]byte, 65521)
	r := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // test data
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

// patternReader yields n bytes of patternBlock repeated, without allocating n.
type patternReader struct{ off, n int64 }

func (p *patternReader) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	b = b[:min(int64(len(b)), p.n-p.off)]
	total := 0
	for len(b) > 0 {
		k := copy(b, patternBlock[p.off%int64(len(patternBlock)):])
		b, p.off, total = b[k:], p.off+int64(k), total+k
	}
	return total, nil
}

func patternCRC(n int64) uint32 {
	h := crc32.NewIEEE()
	_, _ = io.Copy(h, &patternReader{n: n})
	return h.Sum32()
}

// vmHWM is the process's peak resident set size in bytes, from /proc.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}

// TestBodiesStreamedNotBuffered moves a 512 MiB request body and a 512 MiB response body through
// the sidecar and checks that its peak RSS stays under 64 MiB: neither body is buffered whole.
func TestBodiesStreamedNotBuffered(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 1 GiB through the sidecar")
	}
	const size = 512 << 20 // 8 times the RSS bound: a buffered body would show
	const rssLimit = 64 << 20
	want := patternCRC(size)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/upload":
			h := crc32.NewIEEE()
			n, err := io.Copy(h, r.Body)
			_, _ = fmt.Fprintf(w, "%d %d %v", n, h.Sum32(), err)
		case "/download":
			w.Header().Set("Content-Length", strconv.Itoa(size))
			_, _ = io.Copy(w, &patternReader{n: size})
		}
	}))
	defer up.Close()
	sc := startSidecar(t, up.URL)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}

	t.Run("upload", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, sc.URL()+"/upload", &patternReader{n: size})
		req.ContentLength = size
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := fmt.Sprintf("%d %d <nil>", size, want); resp.StatusCode != 200 || string(b) != got {
			t.Errorf("upstream received %d %q, want %q", resp.StatusCode, b, got)
		}
		if hwm := vmHWM(t, sc.PID()); hwm > rssLimit {
			t.Errorf("sidecar peak RSS %d MiB after a 512 MiB upload, want < %d MiB", hwm>>20, rssLimit>>20)
		}
	})
	t.Run("download", func(t *testing.T) {
		resp, err := client.Get(sc.URL() + "/download")
		if err != nil {
			t.Fatal(err)
		}
		h := crc32.NewIEEE()
		n, err := io.Copy(h, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || err != nil || n != size || h.Sum32() != want {
			t.Errorf("downloaded %d: %d bytes crc %d (%v), want %d bytes crc %d", resp.StatusCode, n, h.Sum32(), err, size, want)
		}
		if hwm := vmHWM(t, sc.PID()); hwm > rssLimit {
			t.Errorf("sidecar peak RSS %d MiB after a 512 MiB download, want < %d MiB", hwm>>20, rssLimit>>20)
		}
	})
	t.Logf("sidecar peak RSS (VmHWM) %d MiB", vmHWM(t, sc.PID())>>20)
}

// TestChunkedStreamedBothWays sends a chunked request whose next chunk is written only after
// the application has read the previous one, and gets a chunked response whose next chunk is
// written only after the client has read the previous one: each chunk must pass through the
// sidecar on its own, in both directions, and stay chunked.
func TestChunkedStreamedBothWays(t *testing.T) {
	const n = 4
	var upGot, clientGot [n]chan struct{}
	for i := range n {
		upGot[i], clientGot[i] = make(chan struct{}), make(chan struct{})
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/upload":
			if r.ContentLength != -1 || !slices.Equal(r.TransferEncoding, []string{"chunked"}) {
				t.Errorf("upstream got the request with length %d and Transfer-Encoding %q, want chunked", r.ContentLength, r.TransferEncoding)
			}
			var all []byte
			for i := range n {
				part := make([]byte, len("part-0"))
				if _, err := io.ReadFull(r.Body, part); err != nil {
					t.Errorf("upstream reading chunk %d: %v", i, err)
					return
				}
				all = append(all, part...)
				close(upGot[i])
			}
			rest, _ := io.ReadAll(r.Body)
			_, _ = w.Write(append(all, rest...))
		case "/download":
			f := w.(http.Flusher)
			for i := range n {
				_, _ = fmt.Fprintf(w, "part-%d", i)
				f.Flush()
				if !waitClosed(t, clientGot[i], fmt.Sprintf("the client reading response chunk %d", i)) {
					return
				}
			}
		}
	}))
	defer up.Close()
	sc := startSidecar(t, up.URL)

	t.Run("request", func(t *testing.T) {
		c := dialRaw(t, sc.Addr)
		c.send(t, "POST /upload HTTP/1.1\r\nHost: app\r\nTransfer-Encoding: chunked\r\n\r\n")
		for i := range n {
			c.send(t, fmt.Sprintf("6\r\npart-%d\r\n", i))
			if !waitClosed(t, upGot[i], fmt.Sprintf("the upstream reading request chunk %d before the client sent the next", i)) {
				return
			}
		}
		c.send(t, "0\r\n\r\n")
		resp, _, body := c.response(t, http.MethodPost)
		if resp.StatusCode != 200 || body != "part-0part-1part-2part-3" {
			t.Errorf("echo: %d %q", resp.StatusCode, body)
		}
	})
	t.Run("response", func(t *testing.T) {
		resp, err := http.Get(sc.URL() + "/download")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.ContentLength != -1 || !slices.Equal(resp.TransferEncoding, []string{"chunked"}) {
			t.Errorf("response length %d, Transfer-Encoding %q, want chunked", resp.ContentLength, resp.TransferEncoding)
		}
		for i := range n {
			part := make([]byte, len("part-0"))
			if _, err := io.ReadFull(resp.Body, part); err != nil || string(part) != fmt.Sprintf("part-%d", i) {
				t.Fatalf("chunk %d: %q %v", i, part, err)
			}
			close(clientGot[i])
		}
	})
}

// TestEventStreamEventByEvent: an upstream writes a text/event-stream event every 200 ms and
// writes the next one only after the client has read the previous one, so an event held back
// anywhere on the way (buffered until more data or the end) stops the stream.
func TestEventStreamEventByEvent(t *testing.T) {
	const n = 5
	var mu sync.Mutex
	acks := map[string][]chan struct{}{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ack := acks[r.URL.Query().Get("client")]
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for i := range n {
			<-tick.C
			_, _ = fmt.Fprintf(w, "id: %d\ndata: event %d\n\n", i, i)
			w.(http.Flusher).Flush()
			if !waitClosed(t, ack[i], fmt.Sprintf("the client reading event %d before the upstream wrote the next", i)) {
				return
			}
		}
	}))
	defer up.Close()
	sc := startSidecar(t, up.URL)
	for name, client := range clients() {
		t.Run(name, func(t *testing.T) {
			ack := make([]chan struct{}, n)
			for i := range ack {
				ack[i] = make(chan struct{})
			}
			mu.Lock()
			acks[name] = ack
			mu.Unlock()
			resp, err := client.Get(sc.URL() + "/events?client=" + name)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Errorf("Content-Type %q", ct)
			}
			br := bufio.NewReader(resp.Body)
			for i := range n {
				var ev []string
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						t.Fatalf("event %d: %v after %q", i, err, ev)
					}
					if line == "\n" {
						break
					}
					ev = append(ev, line)
				}
				if want := []string{fmt.Sprintf("id: %d\n", i), fmt.Sprintf("data: event %d\n", i)}; !slices.Equal(ev, want) {
					t.Fatalf("event %d: %q, want %q", i, ev, want)
				}
				close(ack[i])
			}
		})
	}
}

// TestTrailersBothWays sends a request with a trailer and gets a response with a declared
// and an undeclared (http.TrailerPrefix) trailer, over HTTP/1.1 and h2c.
func TestTrailersBothWays(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Trailer", "X-Resp-Trailer")
		_, _ = fmt.Fprintf(w, "body=%s req-trailer=%s", body, r.Trailer.Get("X-Req-Trailer"))
		w.(http.Flusher).Flush()
		w.Header().Set("X-Resp-Trailer", "declared")
		w.Header().Set(http.TrailerPrefix+"X-Late-Trailer", "undeclared")
	}))
	defer up.Close()
	sc := startSidecar(t, up.URL)
	for name, client := range clients() {
		t.Run(name, func(t *testing.T) {
			target := sc.URL()
			if name == "http1" {
				t.Run("direct", func(t *testing.T) { trailersRoundTrip(t, client, up.URL) }) // the test's own control
			}
			trailersRoundTrip(t, client, target)
		})
	}
}

// trailersRoundTrip posts a body with a request trailer to base and checks that the upstream
// saw the trailer and that both response trailers arrived.
func trailersRoundTrip(t *testing.T, client *http.Client, base string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/trailers", io.NopCloser(strings.NewReader("payload")))
	req.ContentLength = -1
	req.Trailer = http.Header{"X-Req-Trailer": {"from-client"}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Run("request-trailer", func(t *testing.T) {
		if err != nil || string(b) != "body=payload req-trailer=from-client" {
			t.Errorf("upstream saw %q (%v): the request trailer did not arrive", b, err)
		}
	})
	t.Run("response-trailers", func(t *testing.T) {
		if got := resp.Trailer.Get("X-Resp-Trailer"); got != "declared" {
			t.Errorf("declared response trailer %q, trailers %v", got, resp.Trailer)
		}
		if got := resp.Trailer.Get("X-Late-Trailer"); got != "undeclared" {
			t.Errorf("undeclared response trailer %q, trailers %v", got, resp.Trailer)
		}
	})
}

// TestExpectContinue: a client that sends Expect: 100-continue gets 100 Continue before it
// sends the body when the application reads it, and the final answer without a 100 when the
// application refuses without reading.
func TestExpectContinue(t *testing.T) {
	var mu sync.Mutex
	var refusedBodies []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/refused-probe" {
			mu.Lock()
			refusedBodies = append(refusedBodies, string(b))
			mu.Unlock()
		}
		_, _ = fmt.Fprintf(w, "got=%s", b)
	}))
	defer up.Close()
	sc := startSidecar(t, up.URL)

	t.Run("continue", func(t *testing.T) {
		c := dialRaw(t, sc.Addr)
		c.send(t, "POST /upload HTTP/1.1\r\nHost: app\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
		interim, _, _ := c.response(t, http.MethodPost)
		if interim.StatusCode != http.StatusContinue {
			t.Fatalf("first response %d before the body was sent, want 100 Continue", interim.StatusCode)
		}
		c.send(t, "hello")
		resp, _, body := c.response(t, http.MethodPost)
		if resp.StatusCode != 200 || body != "got=hello" {
			t.Errorf("final response %d %q", resp.StatusCode, body)
		}
	})
	t.Run("refused", func(t *testing.T) {
		c := dialRaw(t, sc.Addr)
		c.send(t, "POST /refuse HTTP/1.1\r\nHost: app\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
		resp, _, _ := c.response(t, http.MethodPost)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("got %d without sending the body, want the application's 403 (and no 100 Continue)", resp.StatusCode)
		}
	})
}

// TestBodylessResponsesFraming sends HEAD and requests answered 204 and 304 on one connection,
// then a GET: no body bytes may follow those responses (they would corrupt the next one), 204
// carries neither Content-Length nor Transfer-Encoding, and the connection stays usable.
func TestBodylessResponsesFraming(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/head":
			w.Header().Set("Content-Length", "1234")
			w.Header().Set("Content-Type", "text/plain")
			if r.Method != http.MethodHead {
				_, _ = w.Write(make([]byte, 1234))
			}
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/304":
			w.Header().Set("ETag", `"v1"`)
			w.WriteHeader(http.StatusNotModified)
		default:
			_, _ = io.WriteString(w, "after")
		}
	}))
	defer up.Close()
	sc := startSidecar(t, up.URL)
	c := dialRaw(t, sc.Addr)
	for _, step := range []struct {
		method, path string
		status       int
	}{
		{http.MethodHead, "/head", 200},
		{http.MethodGet, "/204", 204},
		{http.MethodGet, "/304", 304},
		{http.MethodHead, "/head", 200},
		{http.MethodGet, "/after", 200},
	} {
		c.send(t, fmt.Sprintf("%s %s HTTP/1.1\r\nHost: app\r\nIf-None-Match: \"v1\"\r\n\r\n", step.method, step.path))
		resp, head, body := c.response(t, step.method)
		if resp.StatusCode != step.status {
			t.Fatalf("%s %s: %d, want %d\n%s", step.method, step.path, resp.StatusCode, step.status, head)
		}
		switch step.path {
		case "/head":
			if cl := resp.Header.Get("Content-Length"); cl != "1234" {
				t.Errorf("HEAD: Content-Length %q, want the application's 1234", cl)
			}
		case "/204":
			if resp.Header.Get("Content-Length") != "" || len(resp.TransferEncoding) > 0 {
				t.Errorf("204 with framing headers:\n%s", head)
			}
		case "/304":
			if len(resp.TransferEncoding) > 0 || resp.Header.Get("ETag") != `"v1"` {
				t.Errorf("304:\n%s", head)
			}
		case "/after":
			if body != "after" {
				t.Errorf("GET after the bodyless responses: %q", body)
			}
		}
		if n := c.br.Buffered(); n > 0 {
			b, _ := c.br.Peek(n)
			t.Fatalf("%s %s: %d bytes after the response: %q", step.method, step.path, n, b)
		}
	}
}

// wsAccept is RFC 6455's Sec-WebSocket-Accept for key.
func wsAccept(key string) string {
	h := sha1.New() //nolint:gosec // see the import
	_, _ = io.WriteString(h, key+"258EAFA5-E914-47DA-95CA-C5AB0DC85B11")
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// TestUpgradeTunnelled upgrades a connection through the sidecar to a hijacking upstream,
// as a WebSocket handshake and as an arbitrary protocol, and echoes bytes both ways over it.
func TestUpgradeTunnelled(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto := r.Header.Get("Upgrade")
		if !strings.EqualFold(r.Header.Get("Connection"), "upgrade") || proto == "" {
			http.Error(w, "not an upgrade: Connection="+r.Header.Get("Connection"), http.StatusBadRequest)
			return
		}
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		resp := "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + proto + "\r\n"
		if key := r.Header.Get("Sec-WebSocket-Key"); key != "" {
			resp += "Sec-WebSocket-Accept: " + wsAccept(key) + "\r\nSec-WebSocket-Protocol: " + r.Header.Get("Sec-WebSocket-Protocol") + "\r\n"
		}
		_, _ = rw.WriteString(resp + "\r\n")
		_ = rw.Flush()
		buf := make([]byte, 4096)
		for {
			n, err := rw.Read(buf)
			if n > 0 {
				if _, err := conn.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}))
	defer up.Close()
	sc := startSidecar(t, up.URL)

	for name, tc := range map[string]struct {
		headers  string
		messages []string
	}{
		"websocket": {
			headers: "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
				"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: chat\r\n",
			// Masked text frames "hi" and "again" (RFC 6455 5.2), echoed back as bytes.
			messages: []string{"\x81\x82\x01\x02\x03\x04" + "\x69\x6b", "\x81\x85\x0a\x0b\x0c\x0d" + "\x6b\x6c\x6d\x6a\x6f"},
		},
		"any-protocol": {
			headers:  "Upgrade: echo/1\r\nConnection: upgrade\r\n",
			messages: []string{"ping 1", "ping 2\x00\xff", strings.Repeat("x", 10000)},
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := dialRaw(t, sc.Addr)
			c.send(t, "GET /socket HTTP/1.1\r\nHost: app\r\n"+tc.headers+"\r\n")
			resp, head, body := c.response(t, http.MethodGet)
			if resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("handshake: %d %q\n%s", resp.StatusCode, body, head)
			}
			if name == "websocket" {
				if got := resp.Header.Get("Sec-WebSocket-Accept"); got != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
					t.Errorf("Sec-WebSocket-Accept %q", got)
				}
				if got := resp.Header.Get("Sec-WebSocket-Protocol"); got != "chat" {
					t.Errorf("Sec-WebSocket-Protocol %q", got)
				}
			}
			for _, m := range tc.messages {
				c.send(t, m)
				got := make([]byte, len(m))
				if _, err := io.ReadFull(c.br, got); err != nil || string(got) != m {
					t.Fatalf("echo of %d bytes: %q %v", len(m), got, err)
				}
			}
		})
	}
}

// TestHeadersAsSent: a raw client sends headers in a chosen order, with unusual casing,
// repeated names interleaved with others, a Host and an X-Forwarded-For; a raw upstream reads
// the bytes the sidecar sent. Asserted: Host is the client's; X-Forwarded-For is the client's
// with the peer appended; the values of a repeated header arrive in the client's order; the
// client's distinct headers arrive in the client's order (first occurrences; RFC 9110 5.3 lets
// a proxy merge repeated lines, so merged lines count at their first position). Names are
// compared case-insensitively: HTTP lets an intermediary change a name's casing (RFC 9110
// 5.1), so casing is logged, not asserted.
func TestHeadersAsSent(t *testing.T) {
	up := newRawUpstream(t, nil)
	sc := startSidecar(t, up.URL())
	c := dialRaw(t, sc.Addr)
	c.send(t, "GET /headers HTTP/1.1\r\n"+
		"Host: app.example:8080\r\n"+
		"x-CuStOm: one\r\n"+
		"Zeta: z\r\n"+
		"Accept: */*\r\n"+
		"X-Repeat: first\r\n"+
		"alpha: a\r\n"+
		"x-repeat: second\r\n"+
		"X-Forwarded-For: 203.0.113.7\r\n"+
		"X-REPEAT: third\r\n"+
		"Middle-Header: m\r\n"+
		"\r\n")
	resp, _, _ := c.response(t, http.MethodGet)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	reqs := up.Requests()
	if len(reqs) != 1 {
		t.Fatalf("upstream got %d requests, problems %q", len(reqs), up.Problems())
	}
	r := reqs[0]
	_, fields := headLines(r.Head)
	t.Logf("upstream received:\n%s", r.Head)

	t.Run("host", func(t *testing.T) {
		if r.Req.Host != "app.example:8080" {
			t.Errorf("Host %q, want the client's app.example:8080", r.Req.Host)
		}
	})
	values := func(name string) []string {
		var vs []string
		for _, f := range fields {
			n, v, _ := strings.Cut(f, ":")
			if strings.EqualFold(n, name) {
				for part := range strings.SplitSeq(v, ",") {
					vs = append(vs, strings.TrimSpace(part))
				}
			}
		}
		return vs
	}
	t.Run("x-forwarded-for-appended", func(t *testing.T) {
		if got := values("X-Forwarded-For"); !slices.Equal(got, []string{"203.0.113.7", "127.0.0.1"}) {
			t.Errorf("X-Forwarded-For %q, want the client's then the peer 127.0.0.1", got)
		}
	})
	t.Run("repeated-kept-in-order", func(t *testing.T) {
		if got := values("X-Repeat"); !slices.Equal(got, []string{"first", "second", "third"}) {
			t.Errorf("repeated header's values %q, want first, second, third", got)
		}
	})
	t.Run("distinct-in-client-order", func(t *testing.T) {
		sent := []string{"x-custom", "zeta", "accept", "x-repeat", "alpha", "middle-header"}
		var order []string
		for _, n := range fieldNames(fields) {
			if n := strings.ToLower(n); slices.Contains(sent, n) && !slices.Contains(order, n) {
				order = append(order, n)
			}
		}
		if !slices.Equal(order, sent) {
			t.Errorf("distinct headers arrived in the order %q, the client sent %q", order, sent)
		}
	})
	t.Logf("names as received (casing not asserted): %q", fieldNames(fields))
}

// TestHopByHopRemoved: hop-by-hop headers (RFC 9110 7.6.1: Connection and the headers it
// names, Keep-Alive, Proxy-Connection, TE except "trailers", Transfer-Encoding, Upgrade when
// not upgrading) sent by the client do not reach the application, and those sent by the
// application do not reach the client; framing is the sidecar's own on each side, and
// end-to-end headers pass both ways.
func TestHopByHopRemoved(t *testing.T) {
	up := newRawUpstream(t, func(_ *upstreamRequest) string {
		return "HTTP/1.1 200 OK\r\n" +
			"Connection: X-Resp-Drop, keep-alive\r\n" +
			"X-Resp-Drop: 1\r\n" +
			"Keep-Alive: timeout=5, max=100\r\n" +
			"Proxy-Connection: keep-alive\r\n" +
			"Upgrade: foo/1\r\n" +
			"X-Resp-Keep: yes\r\n" +
			"Transfer-Encoding: chunked\r\n" +
			"\r\n" +
			"5\r\nhello\r\n0\r\n\r\n"
	})
	sc := startSidecar(t, up.URL())
	c := dialRaw(t, sc.Addr)
	for i := range 2 { // the second proves the connection is still usable
		c.send(t, "POST /hop HTTP/1.1\r\n"+
			"Host: app\r\n"+
			"Connection: keep-alive, X-Drop-Me\r\n"+
			"X-Drop-Me: 1\r\n"+
			"Keep-Alive: timeout=5\r\n"+
			"Proxy-Connection: keep-alive\r\n"+
			"TE: trailers, deflate\r\n"+
			"Upgrade: foo/1\r\n"+
			"X-Keep: yes\r\n"+
			"Transfer-Encoding: chunked\r\n"+
			"\r\n"+
			"3\r\nabc\r\n0\r\n\r\n")
		resp, head, body := c.response(t, http.MethodPost)
		if resp.StatusCode != 200 || body != "hello" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		_, fields := headLines(head)
		checkHopByHop(t, "response to the client", fields, "X-Resp-Drop", "X-Resp-Keep")
		var framing []string
		for _, f := range fields {
			if n, _, _ := strings.Cut(f, ":"); strings.EqualFold(n, "Transfer-Encoding") || strings.EqualFold(n, "Content-Length") {
				framing = append(framing, f)
			}
		}
		if len(framing) != 1 || (!strings.HasPrefix(strings.ToLower(framing[0]), "content-length:") && strings.ToLower(framing[0]) != "transfer-encoding: chunked") {
			t.Errorf("response framing %q, want one Content-Length or Transfer-Encoding: chunked", framing)
		}
	}
	reqs := up.Requests()
	if len(reqs) != 2 || len(up.Problems()) > 0 {
		t.Fatalf("upstream got %d requests, problems %q", len(reqs), up.Problems())
	}
	for _, r := range reqs {
		_, fields := headLines(r.Head)
		checkHopByHop(t, "request to the upstream", fields, "X-Drop-Me", "X-Keep")
		if string(r.Body) != "abc" {
			t.Errorf("upstream body %q", r.Body)
		}
	}
}

// checkHopByHop fails t if fields (raw "name: value" lines) carry a hop-by-hop header, the
// header dropped (named in Connection by the sender), or lack the end-to-end header kept.
func checkHopByHop(t *testing.T, where string, fields []string, dropped, kept string) {
	t.Helper()
	seen := false
	for _, f := range fields {
		name, value, _ := strings.Cut(f, ":")
		value = strings.TrimSpace(value)
		switch {
		case strings.EqualFold(name, kept):
			seen = true
		case strings.EqualFold(name, dropped), strings.EqualFold(name, "Keep-Alive"),
			strings.EqualFold(name, "Proxy-Connection"), strings.EqualFold(name, "Upgrade"):
			t.Errorf("%s carries hop-by-hop %q", where, f)
		case strings.EqualFold(name, "TE") && !strings.EqualFold(value, "trailers"):
			t.Errorf("%s carries %q (only TE: trailers may pass)", where, f)
		case strings.EqualFold(name, "Connection"):
			for tok := range strings.SplitSeq(value, ",") {
				if tok := strings.ToLower(strings.TrimSpace(tok)); tok != "keep-alive" && tok != "close" {
					t.Errorf("%s carries %q", where, f)
				}
			}
		}
	}
	if !seen {
		t.Errorf("%s lacks the end-to-end header %s", where, kept)
	}
}
