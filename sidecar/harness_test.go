package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// The black-box tests in this package run the built sluice-sidecar binary, built once per test
// process; TestMain removes it at the end.
var sidecarBin = proc.Binary{Name: "sluice-sidecar"}

func TestMain(m *testing.M) {
	code := m.Run()
	sidecarBin.Remove()
	os.Exit(code)
}

// sidecarBinary builds sluice-sidecar once per test process and returns its path.
func sidecarBinary(t testing.TB) string { return sidecarBin.Path(t) }

// sidecar is one running sluice-sidecar process.
type sidecar struct {
	// Addr is the proxy listener (host:port), Admin the metrics listener.
	Addr, Admin string
	cmd         *exec.Cmd
	logs        *lockedBuffer
}

// PID is the process id, for /proc.
func (s *sidecar) PID() int { return s.cmd.Process.Pid }

// Logs returns everything the process wrote to stderr so far.
func (s *sidecar) Logs() string { return s.logs.String() }

// URL is the proxy's base URL.
func (s *sidecar) URL() string { return "http://" + s.Addr }

// startSidecar starts the binary in front of upstream (http://host:port) with a real
// redis-server and one policy selecting the pod whose single rule never denies (decided in
// Redis), so that every request takes the full decision path, then waits for /readyz. extra
// flags are appended to the command line. A process that exits before it is ready (an unknown
// flag, for instance) fails the test with its output.
func startSidecar(t testing.TB, upstream string, extra ...string) *sidecar {
	t.Helper()
	redis := redisserver.StartTest(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "policies.json")
	doc := st.Doc(t, st.Policy("behaviour", []policy.Rule{st.Rule("never-denies", 100_000_000, time.Second)}))
	if err := os.WriteFile(cfg, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	return launchSidecar(t, upstream, cfg, append([]string{"--redis-url", redis.URL(), "--log-level", "debug"}, extra...)...)
}

// launchSidecar starts the binary in front of upstream with the policies file cfg, labels
// app=behaviour and the flags extra, and waits for /readyz, as startSidecar does.
func launchSidecar(t testing.TB, upstream, cfg string, extra ...string) *sidecar {
	t.Helper()
	bin := sidecarBinary(t)
	s := &sidecar{Addr: freeLoopback(t), Admin: freeLoopback(t), logs: &lockedBuffer{}}
	args := append([]string{
		"--listen", s.Addr,
		"--metrics-listen", s.Admin,
		"--upstream", upstream,
		"--config", cfg,
		"--pod-labels-file", "",
		"--pod-labels", "app=behaviour",
	}, extra...)
	s.cmd = proc.Own(exec.Command(bin, args...))
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-exited //nolint:errcheck // killed: the exit status only says so
		if t.Failed() {
			t.Logf("sidecar %s log:\n%s", strings.Join(args, " "), s.Logs())
		}
	})
	deadline := time.Now().Add(proc.Patience)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("sidecar exited before it was ready (%v): %s\n%s", err, strings.Join(extra, " "), s.Logs())
		default:
		}
		resp, err := http.Get("http://" + s.Admin + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sidecar not ready after %s (last: %v)\n%s", proc.Patience, err, s.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// peekHead waits for one HTTP/1.x header block (start line to the empty line) in br and
// returns a copy of its raw bytes without consuming them: the caller then parses br with
// net/http (http.ReadRequest, http.ReadResponse), so no test depends on a hand-written parser
// and the raw bytes show names, casing and order as sent. A block over br's size fails.
func peekHead(br *bufio.Reader) ([]byte, error) {
	n := 1
	for {
		b, err := br.Peek(n)
		if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
			return bytes.Clone(b[:i+4]), nil
		}
		if err != nil {
			if len(b) == 0 {
				return nil, err // closed (or reset) before a byte of a header block
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				return nil, fmt.Errorf("header block over %d bytes", br.Size())
			}
			return b, fmt.Errorf("%w after %d bytes of a header block", io.ErrUnexpectedEOF, len(b))
		}
		// Look at everything already buffered before waiting for one byte more.
		if br.Buffered() > len(b) {
			n = br.Buffered()
		} else {
			n = len(b) + 1
		}
	}
}

// headLines splits a raw header block into its field lines (without the start line and the
// final empty line), each as "name: value" exactly as sent.
func headLines(head []byte) (start string, fields []string) {
	lines := strings.Split(strings.TrimSuffix(string(head), "\r\n\r\n"), "\r\n")
	return lines[0], lines[1:]
}

// fieldNames are the names of fields, as sent (casing kept), in order.
func fieldNames(fields []string) []string {
	names := make([]string, 0, len(fields))
	for _, f := range fields {
		name, _, _ := strings.Cut(f, ":")
		names = append(names, name)
	}
	return names
}

// rawConn is a client connection to the sidecar driven byte by byte.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(proc.Patience))
	return &rawConn{Conn: c, br: bufio.NewReaderSize(c, 64<<10)}
}

func (c *rawConn) send(t testing.TB, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// response reads one response to a request of method, returning it with its body read
// and the raw header block.
func (c *rawConn) response(t testing.TB, method string) (*http.Response, []byte, string) {
	t.Helper()
	head, err := peekHead(c.br)
	if err != nil {
		t.Fatalf("reading a response: %v (got %q)", err, head)
	}
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("parsing a response: %v\n%s", err, head)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading a response body: %v", err)
	}
	return resp, head, string(body)
}

// closedByPeer reads until the peer closes the connection or within fails; it returns what was
// read. A reset counts as closed.
func (c *rawConn) closedByPeer(within time.Duration) ([]byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(within))
	b, err := io.ReadAll(c.br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return b, fmt.Errorf("connection still open after %v", within)
	}
	return b, nil
}

// upstreamRequest is one request as a raw upstream received it.
type upstreamRequest struct {
	// Head is the raw header block, exactly as the sidecar sent it.
	Head []byte
	Req  *http.Request
	Body []byte
}

// rawUpstream is the application as a raw TCP server: it parses what the sidecar sends with
// net/http's ReadRequest, keeps each request's raw header block, and records as a problem
// anything that is not a well-formed request with one unambiguous framing (a parse error, both
// Content-Length and Transfer-Encoding, several Content-Length lines, a Transfer-Encoding other
// than "chunked", a malformed body). A body cut short by a closed connection is not a problem:
// the sidecar aborts the upstream request when its client goes away mid-body. Each problem is
// recorded before the connection is closed, so a client that got its answer sees it.
type rawUpstream struct {
	ln net.Listener
	// respond returns the raw response to a request; nil answers 200 "ok".
	respond func(*upstreamRequest) string

	mu       sync.Mutex
	reqs     []*upstreamRequest
	problems []string
	conns    int // connections that carried at least one request
}

func newRawUpstream(t testing.TB, respond func(*upstreamRequest) string) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln, respond: respond}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.serve(c)
		}
	}()
	return u
}

// URL is the upstream's base URL, for --upstream.
func (u *rawUpstream) URL() string { return "http://" + u.ln.Addr().String() }

// Requests are the requests received so far, in arrival order.
func (u *rawUpstream) Requests() []*upstreamRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*upstreamRequest(nil), u.reqs...)
}

// Problems are the malformed requests received so far.
func (u *rawUpstream) Problems() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.problems...)
}

// mark is how many requests and problems the upstream has recorded, for reachedNothing.
func (u *rawUpstream) mark() [2]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return [2]int{len(u.reqs), len(u.problems)}
}

// Conns counts the connections that carried at least one request.
func (u *rawUpstream) Conns() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.conns
}

func (u *rawUpstream) problem(format string, args ...any) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.problems = append(u.problems, fmt.Sprintf(format, args...))
}

func (u *rawUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 2<<20)
	for n := 0; ; n++ {
		head, err := peekHead(br)
		if err != nil {
			// No byte of a request: a readiness probe, or an idle connection closed.
			if len(head) > 0 {
				u.problem("request %d: incomplete header block: %v: %q", n, err, head)
			}
			return
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			u.problem("request %d: ReadRequest: %v\n%s", n, err, head)
			return
		}
		_, fields := headLines(head)
		var cl, te []string
		for _, f := range fields {
			name, value, _ := strings.Cut(f, ":")
			switch strings.ToLower(name) {
			case "content-length":
				cl = append(cl, strings.TrimSpace(value))
			case "transfer-encoding":
				te = append(te, strings.TrimSpace(value))
			}
		}
		switch {
		case len(cl) > 0 && len(te) > 0:
			u.problem("request %d has both Content-Length and Transfer-Encoding:\n%s", n, head)
			return
		case len(cl) > 1:
			u.problem("request %d has %d Content-Length lines:\n%s", n, len(cl), head)
			return
		case len(te) > 1 || (len(te) == 1 && te[0] != "chunked"):
			u.problem("request %d has Transfer-Encoding %q:\n%s", n, te, head)
			return
		}
		if req.Header.Get("Expect") == "100-continue" {
			_, _ = io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
		}
		body, err := io.ReadAll(io.LimitReader(req.Body, 64<<20))
		if err != nil {
			// A connection closed or reset mid-body is the sidecar aborting for a client that
			// went away; any other error is the body's framing.
			var oe *net.OpError
			if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) && !errors.As(err, &oe) {
				u.problem("request %d: body: %v\n%s", n, err, head)
			}
			return
		}
		r := &upstreamRequest{Head: head, Req: req, Body: body}
		u.mu.Lock()
		u.reqs = append(u.reqs, r)
		if n == 0 {
			u.conns++
		}
		u.mu.Unlock()
		resp := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
		if u.respond != nil {
			resp = u.respond(r)
		}
		if req.Method == http.MethodHead {
			resp, _, _ = strings.Cut(resp, "\r\n\r\n")
			resp += "\r\n\r\n"
		}
		if _, err := io.WriteString(c, resp); err != nil || req.Close {
			return
		}
	}
}

// waitClosed waits for ch to be closed, failing t after proc.Patience: a step of a causality
// chain that never happened.
func waitClosed(t testing.TB, ch <-chan struct{}, what string) bool {
	t.Helper()
	select {
	case <-ch:
		return true
	case <-time.After(proc.Patience):
		t.Errorf("%s did not happen within %s", what, proc.Patience)
		return false
	}
}

// freeLoopback is a free 127.0.0.1 port, as host:port.
func freeLoopback(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// getStatus sends GET url with the header fields and returns the answer's status, its body
// read and discarded.
func getStatus(t testing.TB, url string, header map[string]string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}
