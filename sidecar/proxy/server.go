package proxy

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluice-dev/sluice/internal/inject"
)

// ServerOptions are the client-facing limits of a Server. The zero value is the production
// setting.
type ServerOptions struct {
	// MaxHeaderBytes bounds a request's head, request line and header fields together;
	// a larger one is answered 431 (inject.DefaultMaxHeaderBytes when 0).
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds the time from a request's first byte to the end of its head
	// (and, on a new connection, the wait for the first byte); inject.DefaultReadHeaderTimeout when 0.
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a kept-alive connection
	// (inject.DefaultIdleTimeout when 0).
	IdleTimeout time.Duration
	// Log receives the servers' errors at debug level; nil discards them.
	Log *slog.Logger
}

// Server serves a Handler on one listener: connections that open with the HTTP/2 preface go
// to net/http's server (h2c), every other to fasthttp's (HTTP/1.x).
type Server struct {
	h       *Handler
	opts    ServerOptions
	fast    *fasthttp.Server
	h2      *http.Server
	h1ln    *connListener
	h2ln    *connListener
	mu      sync.Mutex
	ln      net.Listener
	closing bool
	wg      sync.WaitGroup
}

// NewServer returns a Server for h.
func NewServer(h *Handler, o ServerOptions) *Server {
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = inject.DefaultMaxHeaderBytes
	}
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = inject.DefaultReadHeaderTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = inject.DefaultIdleTimeout
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{h: h, opts: o, h1ln: newConnListener(), h2ln: newConnListener()}
	s.fast = &fasthttp.Server{
		Handler:                       h.Serve,
		NoDefaultServerHeader:         true,
		NoDefaultDate:                 true,
		NoDefaultContentType:          true,
		DisableHeaderNamesNormalizing: true,
		StreamRequestBody:             true,
		DisablePreParseMultipartForm:  true,
		// The read buffer holds a request's whole head: its size is the header limit. Idle
		// connections hand their buffers back (ReduceMemoryUsage), so memory follows the
		// requests in flight, not the connections open.
		ReadBufferSize:        o.MaxHeaderBytes,
		WriteBufferSize:       16 << 10,
		ReduceMemoryUsage:     true,
		ReadTimeout:           o.ReadHeaderTimeout,
		IdleTimeout:           o.IdleTimeout,
		CloseOnShutdown:       true,
		SecureErrorLogMessage: true,
		Logger:                fastLogger{o.Log},
		ErrorHandler:          parseError,
		ExpectHandler:         h.expect,
	}
	var p http.Protocols
	p.SetHTTP1(true) // never used: only connections with the preface arrive
	p.SetUnencryptedHTTP2(true)
	s.h2 = &http.Server{
		Handler:           h,
		Protocols:         &p,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(o.Log.Handler(), slog.LevelDebug),
	}
	return s
}

// Serve accepts connections on ln until Shutdown; it returns nil after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.ln = ln
	s.mu.Unlock()
	errc := make(chan error, 2)
	s.wg.Add(2)
	go func() { defer s.wg.Done(); errc <- s.fast.Serve(s.h1ln) }()
	go func() { defer s.wg.Done(); errc <- s.h2.Serve(s.h2ln) }()
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return err
		}
		go s.route(c)
	}
}

// h2Preface is how an HTTP/2 connection with prior knowledge opens (RFC 9113 section 3.4).
var h2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// route reads the first bytes of c and hands it to the server of its protocol.
func (s *Server) route(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(s.opts.ReadHeaderTimeout))
	var head [24]byte
	n := 0
	for {
		m, err := c.Read(head[n:])
		n += m
		if n == len(head) || (n > 0 && !bytes.HasPrefix(h2Preface, head[:n])) {
			break
		}
		if err != nil {
			_ = c.Close()
			return
		}
	}
	sc := &sniffedConn{Conn: c, head: head[:n]}
	if bytes.Equal(head[:n], h2Preface) {
		_ = c.SetReadDeadline(time.Time{})
		s.h2ln.push(sc)
		return
	}
	s.h1ln.push(sc)
}

// Shutdown stops accepting, lets in-flight requests finish (idle connections are closed) and
// returns when they have, or with ctx's error when it ends first.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	ln := s.ln
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	var wg sync.WaitGroup
	var errFast, errH2 error
	wg.Add(2)
	go func() { defer wg.Done(); errFast = s.fast.ShutdownWithContext(ctx) }()
	go func() { defer wg.Done(); errH2 = s.h2.Shutdown(ctx) }()
	wg.Wait()
	s.h1ln.Close()
	s.h2ln.Close()
	return errors.Join(errFast, errH2)
}

// parseError answers a request fasthttp could not read.
func parseError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		// The head did not fit in the read buffer. When not even its first line ended,
		// the request line (the URI) is what was too long.
		if sc, ok := ctx.Conn().(*sniffedConn); ok && !sc.sawLF {
			ctx.Error("414 URI Too Long\n", http.StatusRequestURITooLong)
			return
		}
		ctx.Error("431 Request Header Fields Too Large\n", http.StatusRequestHeaderFieldsTooLarge)
	case errors.As(err, &ne) && ne.Timeout():
		ctx.Error("408 Request Timeout\n", http.StatusRequestTimeout)
	default:
		ctx.Error("400 Bad Request\n", http.StatusBadRequest)
	}
}

// sniffedConn is a connection whose first bytes were read to pick its protocol; they are
// read again first. It also notes whether a line ended since the last request was served
// (sawLF), which tells a request line too long from a header too large.
type sniffedConn struct {
	net.Conn
	head  []byte
	sawLF bool
}

func (c *sniffedConn) Read(p []byte) (int, error) {
	var n int
	var err error
	if len(c.head) > 0 {
		n = copy(p, c.head)
		c.head = c.head[n:]
	} else {
		n, err = c.Conn.Read(p)
	}
	if !c.sawLF && n > 0 && bytes.IndexByte(p[:n], '\n') >= 0 {
		c.sawLF = true
	}
	return n, err
}

// served marks the end of a request on c.
func served(c net.Conn) {
	if sc, ok := c.(*sniffedConn); ok {
		sc.sawLF = false
	}
}

// NetConn is the accepted connection.
func (c *sniffedConn) NetConn() net.Conn { return c.Conn }

// connListener is a net.Listener fed with connections by route.
type connListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newConnListener() *connListener {
	return &connListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) push(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		_ = c.Close()
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return dummyAddr{} }

type dummyAddr struct{}

func (dummyAddr) Network() string { return "tcp" }
func (dummyAddr) String() string  { return "sniffed" }

// fastLogger is fasthttp's logger on slog, at debug level.
type fastLogger struct{ log *slog.Logger }

func (l fastLogger) Printf(format string, args ...any) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug("fasthttp: " + fmtSprintf(format, args...))
	}
}
