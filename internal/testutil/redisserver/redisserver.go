// Package redisserver runs real redis-server processes for tests and the local demo: one
// server, or a small cluster of masters, each on a free loopback port with its own temporary
// directory and no persistence. Tests can stop, kill, pause, resume and restart a server to
// exercise failure handling against the real thing rather than a mock.
//
// Start returns an error and leaves cleanup to the caller (Close), for programs such as
// internal/devenv and bench/chaos; tests use StartTest, which fails the test instead and
// registers the cleanup with it.
//
// The binaries (redis-server, and redis-cli for clusters) are taken from PATH; `make test`
// installs them. The helper never uses a Redis the machine already runs: it picks its own port
// and refuses 6379.
package redisserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/proc"
)

// startTimeout bounds how long a server may take to answer PING after it is started, and to exit
// after a signal. It only bounds a hang: a server answers in milliseconds on an idle machine, but
// a loaded one (or a fleet of clients redialing a restarted server, filling its accept queue)
// can delay the answer by seconds, and a test must not fail for that.
const startTimeout = 2 * time.Minute

// Option changes how Start runs a server.
type Option func(*config)

type config struct {
	args     []string
	cluster  bool
	dir      string
	replicas int    // per master, for StartCluster
	sentinel string // the sentinel configuration file, for StartSentinels
}

// WithArgs appends redis-server command-line configuration, e.g.
// WithArgs("--maxmemory", "10mb"). Later settings override earlier ones, so these win over
// the helper's defaults.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithDir keeps the server's files (its log, redis.log) in dir, created if missing, instead of
// a temporary directory; Close leaves dir in place.
func WithDir(dir string) Option {
	return func(c *config) { c.dir = dir }
}

// WithReplicas gives each master of StartCluster n replicas (servers started with the same
// options), for tests of failover; Start ignores it.
func WithReplicas(n int) Option {
	return func(c *config) { c.replicas = n }
}

// withCluster enables cluster mode; StartCluster uses it.
func withCluster() Option {
	return func(c *config) { c.cluster = true }
}

// withSentinel runs the server as a sentinel (redis-server sentinel.conf --sentinel) whose
// configuration file starts as conf; StartSentinels uses it.
func withSentinel(conf string) Option {
	return func(c *config) { c.sentinel = conf }
}

// Server is one redis-server process. Its methods are safe for concurrent use, but a caller
// normally drives it from one goroutine.
type Server struct {
	bin  string
	dir  string
	port int
	cfg  config

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	paused bool
}

// Start runs a redis-server on a free loopback port and waits until it answers PING. Close
// kills it and removes its directory. Start fails when redis-server is not on PATH or does not
// come up.
func Start(opts ...Option) (*Server, error) {
	bin, err := lookPath("redis-server")
	if err != nil {
		return nil, err
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	dir := cfg.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "redisserver-"); err != nil {
			return nil, fmt.Errorf("redisserver: %w", err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("redisserver: %w", err)
	}
	// redis-server runs in dir (cmd.Dir) and is given dir's paths: a relative one would be
	// resolved twice.
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, fmt.Errorf("redisserver: %w", err)
	}
	s := &Server{bin: bin, dir: dir, cfg: cfg}

	// Another process can take the port between our probe and redis-server's bind; try a few.
	var lastErr error
	for range 5 {
		port, err := freePort(cfg.cluster)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("redisserver: finding a free port: %w", err)
		}
		s.port = port
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	err = fmt.Errorf("redisserver: starting redis-server: %w\nlog:\n%s", lastErr, s.log())
	s.Close()
	return nil, err
}

// Addr is the server's host:port on the loopback interface.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port is the server's TCP port.
func (s *Server) Port() int { return s.port }

// URL is a redis:// URL for the server, database 0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Stop shuts the server down gracefully (SIGTERM) and waits for it to exit. A paused server is
// resumed first so it can see the signal. Stopping a stopped server does nothing.
func (s *Server) Stop() error { return s.stop(syscall.SIGTERM, "stopping") }

// Kill ends the server with SIGKILL and waits for it to exit: clients see connections reset
// and new connections refused.
func (s *Server) Kill() error { return s.stop(syscall.SIGKILL, "killing") }

// stop sends sig and waits for the server to exit; doing names the act in an error.
func (s *Server) stop(sig syscall.Signal, doing string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(sig); err != nil {
		return fmt.Errorf("redisserver: %s %s: %w", doing, s.Addr(), err)
	}
	return nil
}

// Pause freezes the server with SIGSTOP: connections stay open and requests go unanswered,
// as with a server that hangs or a network partition. Resume undoes it.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP, true) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT, false) }

// Restart stops the server if it runs (gracefully) and starts it again on the same port and
// directory. Data does not survive: the helper disables persistence. Clients using the old
// address reconnect to the new process.
func (s *Server) Restart() error {
	s.mu.Lock()
	err := s.stopLocked(syscall.SIGTERM)
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("redisserver: stopping %s for restart: %w", s.Addr(), err)
	}
	// The port was ours a moment ago, but the kernel may need a moment to release it.
	deadline := time.Now().Add(startTimeout)
	for {
		err = s.start()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redisserver: restarting %s: %w\nlog:\n%s", s.Addr(), err, s.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Close kills the server, if it runs (a paused one too), and removes its directory unless it
// was given with WithDir. Closing a closed server does nothing.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused && s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
	_ = s.stopLocked(syscall.SIGKILL)
	if s.cfg.dir == "" {
		_ = os.RemoveAll(s.dir)
	}
}

// Do sends one command to the server on a fresh connection and returns the reply rendered as
// text: simple and bulk strings as they are, integers in decimal, arrays one element per line.
// A Redis error reply is returned as an error. It is meant for test assertions (CONFIG GET,
// MEMORY USAGE, CLUSTER INFO), not for load.
func (s *Server) Do(args ...string) (string, error) {
	return do(s.Addr(), doTimeout, args...)
}

// doTimeout bounds one Do, or one readiness PING: long enough for a loaded machine, short enough
// that a paused server's caller gets its error.
const doTimeout = 10 * time.Second

func (s *Server) start() error {
	var args []string
	if s.cfg.sentinel != "" {
		// A sentinel rewrites its file (what it learnt of the replicas, the other sentinels
		// and failovers): written once, kept across restarts.
		conf := filepath.Join(s.dir, "sentinel.conf")
		if _, err := os.Stat(conf); err != nil {
			if err := os.WriteFile(conf, []byte(s.cfg.sentinel), 0o600); err != nil {
				return err
			}
		}
		args = append(args, conf, "--sentinel")
	}
	args = append(args,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"),
		"--loglevel", "notice",
	)
	if s.cfg.cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
			"--cluster-node-timeout", "2000",
		)
	}
	args = append(args, s.cfg.args...)
	cmd := proc.Own(exec.Command(s.bin, args...))
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited, s.paused = cmd, exited, false
	s.mu.Unlock()

	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited at start: %v", cmd.ProcessState)
		default:
		}
		// After a restart, a fleet of clients redialing fills the accept queue, and a short
		// timeout would give up on a server that is answering.
		if reply, err := do(s.Addr(), doTimeout, "PING"); err == nil && reply == "PONG" {
			return nil
		}
		if time.Now().After(deadline) {
			s.mu.Lock()
			_ = s.stopLocked(syscall.SIGKILL)
			s.mu.Unlock()
			return fmt.Errorf("no PONG within %s", startTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stopLocked sends sig to a running server and waits for it to exit; s.mu is held.
func (s *Server) stopLocked(sig syscall.Signal) error {
	wait := startTimeout
	if s.cmd == nil {
		return nil
	}
	select {
	case <-s.exited:
		s.cmd = nil
		return nil
	default:
	}
	if err := s.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	if s.paused && sig != syscall.SIGKILL {
		// A stopped process only acts on SIGTERM once it runs again.
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-s.exited:
	case <-time.After(wait):
		_ = s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("did not exit within %s after %v; killed", wait, sig)
	}
	s.cmd, s.paused = nil, false
	return nil
}

func (s *Server) signal(sig syscall.Signal, paused bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("redisserver: %v to %s, which is not running", sig, s.Addr())
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("redisserver: %v to %s: %w", sig, s.Addr(), err)
	}
	s.paused = paused
	return nil
}

// log returns the tail of the server's log file, for failure messages.
func (s *Server) log() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

func lookPath(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("redisserver: %s is not on PATH (%w); `make test` installs it, or install the redis-server and redis-tools packages", name, err)
	}
	return p, nil
}

// FreePort returns a loopback TCP port nobody listens on at the moment, never Redis's default
// 6379, for a program to bind next to the servers (another process may take it first).
func FreePort() (int, error) { return freePort(false) }

// freePort returns a loopback TCP port nobody listens on. With cluster, it also checks the
// cluster bus port (port+10000), which Redis derives from the client port.
func freePort(cluster bool) (int, error) {
	for range 100 {
		var port int
		if cluster {
			// The bus port must fit in 16 bits; probe a range where it does.
			port = 20000 + rand.IntN(55535-20000) //nolint:gosec // a port to probe, not a secret
		} else {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return 0, err
			}
			port = l.Addr().(*net.TCPAddr).Port
			_ = l.Close()
		}
		if port == 6379 || port+10000 == 6379 {
			continue
		}
		if !portFree(port) || (cluster && !portFree(port+10000)) {
			continue
		}
		return port, nil
	}
	return 0, errors.New("no free port after 100 tries")
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// do sends one RESP command on a new connection and renders the reply; see Server.Do.
func do(addr string, timeout time.Duration, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(conn))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		parts := make([]string, 0, max(n, 0))
		for range n {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	default:
		return "", fmt.Errorf("unexpected reply %q", line)
	}
}
