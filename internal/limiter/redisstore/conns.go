package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Connections.
//
// Every injected pod holds its own connections to the shared Redis, so what one sidecar holds,
// multiplied by the fleet, is what Redis holds (maxclients, memory and event-loop work per
// connection). So a Store keeps at most MaxConns round trips in flight per Redis node (a
// single node, or each master of a cluster; see batch.go), pipelining doing the work, and the
// clients NewClient makes hold no more connections than that:
//
//   - one pool per node of MaxConns connections (PoolSize and MaxActiveConns), pipelines on
//     the same pool (PipelinePoolSize -1: go-redis otherwise keeps a second pool for them),
//     nothing dialled ahead (MinIdleConns 0);
//   - a cluster client connects only to the masters its keys live on: the slot map is read
//     through a connection already held (or, before there is one, on a connection of its
//     own, closed at once), never on a connection left open to a random node (clusterSlots);
//   - connections idle for ClientOptions.IdleTimeout are closed (nodeConns.sweep), so a quiet pod
//     holds none; the next call dials again;
//   - a failed dial keeps the node's dials back for a jittered, exponentially growing time
//     (nodeConns.dial): callers fail at once meanwhile (and fall back), and a fleet whose Redis
//     restarts redials spread over up to MaxDialBackoff rather than in the same millisecond.

// MaxConns is the most connections a Store's client holds to one Redis node, and the most round
// trips a Store has in flight to it.
const MaxConns = 2

// DefaultIdleTimeout is ClientOptions.IdleTimeout's default.
const DefaultIdleTimeout = 5 * time.Minute

// The dial backoff after consecutive failed dials to a node: the k-th failure keeps dials back
// for a uniformly random time below min(MaxDialBackoff, minDialBackoff << (k-1)) ("full
// jitter").
const (
	minDialBackoff = 100 * time.Millisecond
	MaxDialBackoff = 2 * time.Second
)

// ErrDialBackoff is wrapped by the error of a dial refused because the node's last dial failed
// and its backoff has not run out; such a Take fails at once (an *Error, ErrUnavailable).
var ErrDialBackoff = errors.New("redis dial backoff after a failed dial")

// ClientOptions configures the client NewClient returns, beyond what its URL says.
type ClientOptions struct {
	// IdleTimeout closes a connection unused for that long; 0 means DefaultIdleTimeout and a
	// negative value never closes idle connections.
	IdleTimeout time.Duration
}

// NewClient returns a go-redis client for rawURL as NewClientFromURL does, holding at most
// MaxConns connections per node (whatever pool options the URL sets) and closing those idle
// for opts.IdleTimeout. See Connections above.
func NewClient(rawURL string, opts ClientOptions) (redis.UniversalClient, error) {
	idle := opts.IdleTimeout
	if idle == 0 {
		idle = DefaultIdleTimeout
	}
	d := &dialer{idle: idle, nodes: map[string]*nodeConns{}}
	return buildClient(rawURL, d)
}

// bound sets the pool options of one node's client: MaxConns connections, pipelines on the
// same pool, none dialled ahead, stale after idle (go-redis checks that lazily, before reuse;
// nodeConns.sweep closes them on time).
func (d *dialer) bound(poolSize, maxActive, minIdle, pipelinePool *int, maxIdleTime *time.Duration) {
	*poolSize, *maxActive, *minIdle, *pipelinePool = MaxConns, MaxConns, 0, -1
	*maxIdleTime = d.idle
	if d.idle < 0 {
		*maxIdleTime = -1
	}
}

// dialer is the go-redis hook of NewClient's clients: the dial gate and the idle closer of every
// node, by address. Safe for concurrent use.
type dialer struct {
	idle time.Duration // < 0: never close
	// onDial, when set (by tests), is called after each dial that made a connection.
	onDial func(addr string)

	mu    sync.Mutex
	nodes map[string]*nodeConns
}

// nodeConns is one node's dial gate and open connections.
type nodeConns struct {
	d    *dialer
	addr string

	mu       sync.Mutex
	failures int       // consecutive failed dials
	notUntil time.Time // no dial before
	open     map[*trackedConn]struct{}
	timer    *time.Timer // the idle sweep, armed while open is not empty

	// For tests: dials made, refused by the gate, connections closed idle.
	dials, refused, closedIdle atomic.Int64
}

func (d *dialer) node(addr string) *nodeConns {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.nodes[addr]
	if n == nil {
		n = &nodeConns{d: d, addr: addr, open: map[*trackedConn]struct{}{}}
		d.nodes[addr] = n
	}
	return n
}

// DialHook gates and tracks every dial of a node's pool.
func (d *dialer) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.node(addr).dial(ctx, network, next)
	}
}

func (d *dialer) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (d *dialer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// dial dials through next unless the node is in backoff, which a failed dial starts. A dial in
// backoff, and a failed one, "succeed" with a deadConn that fails the connection's handshake
// with the reason: the caller fails at once (and falls back), and go-redis's pool does not
// count a dial error. It would otherwise, after PoolSize of them, refuse every dial until a
// probe of its own, once a second, gets through: a fleet whose Redis went away at one
// instant would then probe, and reconnect, on the same second's tick.
func (n *nodeConns) dial(ctx context.Context, network string, next redis.DialHook) (net.Conn, error) {
	n.mu.Lock()
	wait := time.Until(n.notUntil)
	n.mu.Unlock()
	if wait > 0 {
		n.refused.Add(1)
		return &deadConn{err: fmt.Errorf("%w: %s for another %s", ErrDialBackoff, n.addr, wait.Round(time.Millisecond))}, nil
	}
	n.dials.Add(1)
	conn, err := next(ctx, network, n.addr)
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil {
		n.failures++
		window := MaxDialBackoff
		if n.failures < 6 { // 100ms << 5 > 2s
			window = min(MaxDialBackoff, minDialBackoff<<(n.failures-1))
		}
		n.notUntil = time.Now().Add(rand.N(window) + time.Millisecond) //nolint:gosec // jitter, not a secret
		return &deadConn{err: err}, nil
	}
	n.failures, n.notUntil = 0, time.Time{}
	if n.d.onDial != nil {
		n.d.onDial(n.addr)
	}
	if n.d.idle < 0 {
		return conn, nil
	}
	t := &trackedConn{Conn: conn, node: n}
	t.touch()
	n.open[t] = struct{}{}
	n.armLocked()
	if sc, ok := conn.(syscall.Conn); ok {
		// go-redis's health check before reuse reads the socket through SyscallConn.
		return &trackedSyscallConn{trackedConn: t, sc: sc}, nil
	}
	return t, nil
}

// Conns is how many connections NewClient's dialer holds open to the node at addr. For tests.
func (d *dialer) conns(addr string) int {
	n := d.node(addr)
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.open)
}

// armLocked schedules the idle sweep at the instant the oldest-used connection turns idle; n.mu
// is held.
func (n *nodeConns) armLocked() {
	if n.timer != nil || len(n.open) == 0 {
		return
	}
	oldest := int64(0)
	for c := range n.open {
		if u := c.used.Load(); oldest == 0 || u < oldest {
			oldest = u
		}
	}
	// A connection is closed once idle for the timeout plus a margin: go-redis, which marks it
	// stale after the timeout measured from its own last use (a little after the socket's),
	// then never hands it out again, so closing it cannot fail a call.
	at := time.Unix(0, oldest).Add(n.d.idle + idleMargin(n.d.idle))
	n.timer = time.AfterFunc(max(time.Until(at), time.Millisecond), n.sweep)
}

func idleMargin(idle time.Duration) time.Duration { return min(idle/10, time.Second) }

// sweep closes the connections idle for long enough and re-arms for the others. No goroutine
// outlives the node's last connection.
func (n *nodeConns) sweep() {
	limit := time.Now().Add(-n.d.idle - idleMargin(n.d.idle)).UnixNano()
	var idle []*trackedConn
	n.mu.Lock()
	n.timer = nil
	for c := range n.open {
		if c.used.Load() <= limit {
			idle = append(idle, c)
		}
	}
	n.mu.Unlock()
	for _, c := range idle {
		n.closedIdle.Add(1)
		_ = c.Close()
	}
	n.mu.Lock()
	n.armLocked()
	n.mu.Unlock()
}

// deadConn is a connection that was never made: reads and writes fail with err, why.
type deadConn struct{ err error }

func (c *deadConn) Read([]byte) (int, error)         { return 0, c.err }
func (c *deadConn) Write([]byte) (int, error)        { return 0, c.err }
func (c *deadConn) Close() error                     { return nil }
func (c *deadConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *deadConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *deadConn) SetDeadline(time.Time) error      { return nil }
func (c *deadConn) SetReadDeadline(time.Time) error  { return nil }
func (c *deadConn) SetWriteDeadline(time.Time) error { return nil }

// trackedConn is a pooled connection whose last use the idle closer reads.
type trackedConn struct {
	net.Conn
	node   *nodeConns
	used   atomic.Int64 // Unix ns of the last read or write
	closed atomic.Bool
}

func (c *trackedConn) touch() { c.used.Store(time.Now().UnixNano()) }

func (c *trackedConn) Read(b []byte) (int, error) {
	c.touch()
	return c.Conn.Read(b)
}

func (c *trackedConn) Write(b []byte) (int, error) {
	c.touch()
	return c.Conn.Write(b)
}

// Close closes the connection once and forgets it.
func (c *trackedConn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	n := c.node
	n.mu.Lock()
	delete(n.open, c)
	n.mu.Unlock()
	return c.Conn.Close()
}

// trackedSyscallConn is a trackedConn over a socket, which go-redis health-checks.
type trackedSyscallConn struct {
	*trackedConn
	sc syscall.Conn
}

func (c *trackedSyscallConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

// clusterSlots returns the ClusterSlots function of a cluster client: CLUSTER SLOTS asked of a
// node the client holds a connection to, in random order, or else of a seed or a node of the
// last map on a connection of its own, closed after the reply, so that a cluster client holds
// connections only to the masters its keys live on (go-redis would keep one open to a random
// node, and ask again every ClusterStateReloadInterval).
func (d *dialer) clusterSlots(seed *redis.Options, seeds []string, nodes *nodeClients) func(context.Context) ([]redis.ClusterSlot, error) {
	var lastMu sync.Mutex
	var last []string // the nodes of the last map
	return func(ctx context.Context) ([]redis.ClusterSlot, error) {
		var firstErr error
		keep := func(slots []redis.ClusterSlot, origin string) []redis.ClusterSlot {
			oHost, oPort, _ := net.SplitHostPort(origin)
			var addrs []string
			for _, s := range slots {
				for i := range s.Nodes {
					s.Nodes[i].Addr = nodeAddr(s.Nodes[i].Addr, oHost, oPort)
					addrs = append(addrs, s.Nodes[i].Addr)
				}
			}
			lastMu.Lock()
			last = addrs
			lastMu.Unlock()
			return slots
		}
		for _, c := range nodes.shuffled() {
			if d.conns(c.Options().Addr) == 0 {
				continue
			}
			slots, err := c.ClusterSlots(ctx).Result() //nolint:staticcheck // Redis 5 and 6 have no CLUSTER SHARDS; go-redis's own slot load asks CLUSTER SLOTS too
			if err == nil {
				return keep(slots, c.Options().Addr), nil
			}
			if firstErr == nil {
				firstErr = err
			}
		}
		lastMu.Lock()
		addrs := append(append([]string{}, seeds...), last...)
		lastMu.Unlock()
		rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] }) //nolint:gosec // load spreading, not a secret
		tried := map[string]bool{}
		for _, addr := range addrs {
			if tried[addr] {
				continue
			}
			tried[addr] = true
			o := *seed
			o.Addr = addr
			if o.TLSConfig != nil && o.TLSConfig.ServerName == "" {
				o.TLSConfig = o.TLSConfig.Clone()
				o.TLSConfig.ServerName, _, _ = net.SplitHostPort(addr)
			}
			c := redis.NewClient(&o)
			c.AddHook(d)
			slots, err := c.ClusterSlots(ctx).Result() //nolint:staticcheck // Redis 5 and 6 have no CLUSTER SHARDS; go-redis's own slot load asks CLUSTER SLOTS too
			_ = c.Close()
			if err == nil {
				return keep(slots, addr), nil
			}
			if firstErr == nil {
				firstErr = err
			}
		}
		if firstErr == nil {
			firstErr = errors.New("redisstore: no cluster node to ask for the slot map")
		}
		return nil, firstErr
	}
}

// nodeAddr is how go-redis reads a node's address in CLUSTER SLOTS asked of origin: a loopback
// IP is origin's host unless that is loopback too (a node behind NAT announces 127.0.0.1), and
// port 0 (a TLS-only node) is origin's port. go-redis does this for its own slot queries; for a
// ClusterSlots function it knows no origin and would blank a loopback host (see nodeClient).
func nodeAddr(addr, originHost, originPort string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		if oip := net.ParseIP(originHost); originHost != "" && originHost != "localhost" && (oip == nil || !oip.IsLoopback()) {
			host = originHost
		}
	}
	if port == "0" && originPort != "" {
		port = originPort
	}
	return net.JoinHostPort(host, port)
}

// nodeClient makes a cluster's node clients. go-redis turns the loopback host of a node from a
// ClusterSlots function into an empty one (it has no origin to put there; nodeAddr has done
// that already), which this puts back.
func nodeClient(opt *redis.Options) *redis.Client {
	if host, port, err := net.SplitHostPort(opt.Addr); err == nil && host == "" {
		opt.Addr = net.JoinHostPort("127.0.0.1", port)
	}
	return redis.NewClient(opt)
}

// nodeClients are a cluster client's node clients, by address, as go-redis makes them.
type nodeClients struct {
	mu      sync.Mutex
	clients map[string]*redis.Client
}

func (n *nodeClients) add(c *redis.Client) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.clients == nil {
		n.clients = map[string]*redis.Client{}
	}
	n.clients[c.Options().Addr] = c
}

func (n *nodeClients) shuffled() []*redis.Client {
	n.mu.Lock()
	out := make([]*redis.Client, 0, len(n.clients))
	for _, c := range n.clients {
		out = append(out, c)
	}
	n.mu.Unlock()
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] }) //nolint:gosec // load spreading, not a secret
	return out
}
