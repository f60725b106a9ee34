package gateway

import (
	"container/list"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/termgate/termgate/gateway/internal/promtext"
	"golang.org/x/sys/unix"
)

// Defaults of ListenerConfig.
const (
	DefaultMaxConns        = 4096
	DefaultMaxConnsPerAddr = 256
	DefaultFDHeadroom      = 128
	// DefaultFirstByteTimeout closes a new connection that has sent
	// nothing for this long.
	DefaultFirstByteTimeout = 3 * time.Second
)

// ListenerConfig bounds the connections a Listener lets in. Zero fields
// take the defaults.
type ListenerConfig struct {
	// MaxConns bounds the open connections, authenticated or not.
	MaxConns int
	// MaxConnsPerAddr bounds the open connections from one client: an
	// IPv4 /24 or an IPv6 /64 (behind a reverse proxy, every client has
	// the proxy's).
	MaxConnsPerAddr int
	// MaxPreAuthConns bounds the connections that have not sent a
	// complete request header: new ones, and kept-alive ones between
	// requests (it needs the server's ConnState hook, ConnState). When
	// they are as many, or the connections are MaxConns, a new
	// connection takes the place of the oldest such connection of the
	// client that holds the most of them, if that is more than its own
	// client holds; else it is refused. So idle connections never lock
	// out a client that sends its request. Default MaxConns/4 (at least
	// 1); at most MaxConns.
	MaxPreAuthConns int
	// FirstByteTimeout closes a new connection that sends nothing for
	// this long (DefaultFirstByteTimeout; negative: off). After the first
	// byte the server's ReadHeaderTimeout bounds the rest of the header.
	FirstByteTimeout time.Duration
	// FDHeadroom is how many file descriptors below RLIMIT_NOFILE are kept
	// for starting executions: while fewer are free, new connections are
	// refused. Negative turns the check off.
	FDHeadroom int
	Logger     *slog.Logger
}

// ListenerStats counts a Listener's connections.
type ListenerStats struct {
	Open int `json:"open"`
	// PreAuth counts the open connections that have not sent a complete
	// request header.
	PreAuth int    `json:"preauth"`
	Refused uint64 `json:"refused"`
	// The refused connections by the bound they met: MaxConns,
	// MaxConnsPerAddr, FDHeadroom, MaxPreAuthConns (a new connection
	// whose client already holds the most connections before their
	// headers).
	RefusedConns   uint64 `json:"refused_conns"`
	RefusedAddr    uint64 `json:"refused_addr"`
	RefusedFDs     uint64 `json:"refused_fds"`
	RefusedPreAuth uint64 `json:"refused_preauth"`
	// Evicted counts the connections closed before their header to make
	// room for a new one; FirstByteTimeouts the ones closed for sending
	// nothing within FirstByteTimeout.
	Evicted           uint64 `json:"evicted_preauth"`
	FirstByteTimeouts uint64 `json:"first_byte_timeouts"`
}

// Listener is a net.Listener that refuses connections beyond its bounds:
// it accepts each one and closes it at once, so a refused client learns
// promptly instead of waiting in the kernel's backlog. Its connections
// give their place back when closed, hijacked ones included.
//
// Connections that have not sent a complete request header (pre-auth:
// no token has been seen on them) have a budget of their own
// (MaxPreAuthConns) that a new connection may take a place in by closing
// the oldest of the client holding the most, so neither they nor a
// client reconnecting as fast as they are closed keep another client
// out. Hook ConnState into the http.Server serving the Listener: without
// it every connection stays pre-auth.
type Listener struct {
	net.Listener
	cfg ListenerConfig
	log *slog.Logger

	// openFiles and fileLimit read the process's descriptors in use and
	// RLIMIT_NOFILE; tests replace them.
	openFiles func() (int, error)
	fileLimit func() (uint64, error)

	mu         sync.Mutex
	open       int
	byAddr     map[string]int
	preAuth    map[string]*list.List // the pre-auth *limitedConn of each client, oldest first
	nPreAuth   int
	refused    uint64
	refusedBy  [4]uint64 // by MaxConns, MaxConnsPerAddr, FDHeadroom, MaxPreAuthConns
	evicted    uint64
	timedOut   uint64
	lastWarned time.Time

	// The last count of free descriptors and when it was taken: on a
	// kernel older than 6.2 counting lists /proc/self/fd, about 2 ms with
	// 4,000 open, so far from the limit a count serves for fdRecount.
	fdMu      sync.Mutex
	freeFDs   int64
	countedAt time.Time
}

// fdRecount is how long a count of free descriptors serves while more
// than 4 headrooms are free.
const fdRecount = 100 * time.Millisecond

// NewListener wraps ln. It fails when the descriptor headroom cannot be
// kept: /proc/self/fd is unreadable, or RLIMIT_NOFILE is not above the
// headroom.
func NewListener(ln net.Listener, cfg ListenerConfig) (*Listener, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.MaxConns, DefaultMaxConns)
	def(&cfg.MaxConnsPerAddr, DefaultMaxConnsPerAddr)
	def(&cfg.MaxPreAuthConns, max(1, cfg.MaxConns/4))
	def(&cfg.FDHeadroom, DefaultFDHeadroom)
	if cfg.FirstByteTimeout == 0 {
		cfg.FirstByteTimeout = DefaultFirstByteTimeout
	}
	if cfg.MaxConns < 0 || cfg.MaxConnsPerAddr < 0 || cfg.MaxPreAuthConns < 0 {
		return nil, errors.New("gateway: listener: negative connection cap")
	}
	if cfg.MaxPreAuthConns > cfg.MaxConns {
		return nil, fmt.Errorf("gateway: listener: %d connections before authentication is above the %d in total", cfg.MaxPreAuthConns, cfg.MaxConns)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Listener{Listener: ln, cfg: cfg, log: cfg.Logger, byAddr: map[string]int{}, preAuth: map[string]*list.List{},
		openFiles: promtext.OpenFiles, fileLimit: fileLimit}
	if cfg.FDHeadroom > 0 {
		if _, err := l.openFiles(); err != nil {
			return nil, fmt.Errorf("gateway: listener: cannot count open descriptors to keep a headroom of %d: %w", cfg.FDHeadroom, err)
		}
		limit, err := l.fileLimit()
		if err != nil {
			return nil, fmt.Errorf("gateway: listener: %w", err)
		}
		if limit <= uint64(cfg.FDHeadroom) {
			return nil, fmt.Errorf("gateway: listener: RLIMIT_NOFILE %d leaves nothing above a descriptor headroom of %d: raise the limit or lower the headroom", limit, cfg.FDHeadroom)
		}
	}
	return l, nil
}

// Accept returns the next connection within bounds; those beyond them
// are closed as they arrive.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitedConn{Conn: c, l: l, addr: clientAddr(c.RemoteAddr())}
		why, victim := l.admit(lc)
		if victim != nil {
			victim.Conn.Close()
		}
		if why != "" {
			c.Close()
			l.refuse(lc.addr, why)
			continue
		}
		if l.cfg.FirstByteTimeout > 0 {
			lc.firstByte = time.AfterFunc(l.cfg.FirstByteTimeout, lc.firstByteExpired)
		}
		return lc, nil
	}
}

// admit takes a place for c, as a pre-auth connection, or says why not.
// victim, when not nil, gave its place to c: close it.
func (l *Listener) admit(c *limitedConn) (why string, victim *limitedConn) {
	if why := l.descriptorsLow(); why != "" {
		l.mu.Lock()
		l.refusedBy[2]++
		l.mu.Unlock()
		return why, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byAddr[c.addr] >= l.cfg.MaxConnsPerAddr {
		l.refusedBy[1]++
		return fmt.Sprintf("%d connections open from this client, the maximum", l.byAddr[c.addr]), nil
	}
	if l.open >= l.cfg.MaxConns || l.nPreAuth >= l.cfg.MaxPreAuthConns {
		if victim = l.victimLocked(c.addr); victim == nil {
			return l.fullLocked(), nil
		}
		l.evicted++
		l.releaseLocked(victim)
	}
	l.open++
	l.byAddr[c.addr]++
	l.enterPreAuthLocked(c)
	return "", victim
}

// fullLocked counts and says why a connection found no place.
func (l *Listener) fullLocked() string {
	if l.open >= l.cfg.MaxConns && l.nPreAuth == 0 {
		l.refusedBy[0]++
		return fmt.Sprintf("%d connections open, the maximum", l.open)
	}
	l.refusedBy[3]++
	return fmt.Sprintf("%d connections open before their request header, and this client holds as many of them as any", l.nPreAuth)
}

// victimLocked is the oldest pre-auth connection of the client holding
// the most, when that is more than addr holds; else nil.
func (l *Listener) victimLocked(addr string) *limitedConn {
	var most *list.List
	for _, q := range l.preAuth {
		if most == nil || q.Len() > most.Len() {
			most = q
		}
	}
	if most == nil || most.Len() <= l.preAuthOf(addr) {
		return nil
	}
	return most.Front().Value.(*limitedConn)
}

func (l *Listener) preAuthOf(addr string) int {
	if q := l.preAuth[addr]; q != nil {
		return q.Len()
	}
	return 0
}

// enterPreAuthLocked counts c among the pre-auth connections, newest of
// its client's.
func (l *Listener) enterPreAuthLocked(c *limitedConn) {
	if c.preAuth != nil || c.released {
		return
	}
	q := l.preAuth[c.addr]
	if q == nil {
		q = list.New()
		l.preAuth[c.addr] = q
	}
	c.preAuth = q.PushBack(c)
	l.nPreAuth++
}

// leavePreAuthLocked stops counting c among the pre-auth connections.
func (l *Listener) leavePreAuthLocked(c *limitedConn) {
	if c.preAuth == nil {
		return
	}
	q := l.preAuth[c.addr]
	q.Remove(c.preAuth)
	if q.Len() == 0 {
		delete(l.preAuth, c.addr)
	}
	c.preAuth = nil
	l.nPreAuth--
}

// ConnState is the http.Server hook that tells the Listener which of its
// connections have sent a complete request header (active or hijacked:
// no longer pre-auth) and which wait for the next one (new or idle:
// pre-auth). Set it as the server's ConnState.
func (l *Listener) ConnState(nc net.Conn, state http.ConnState) {
	c := l.own(nc)
	if c == nil {
		return
	}
	l.mu.Lock()
	var victim *limitedConn
	switch state {
	case http.StateActive, http.StateHijacked:
		l.leavePreAuthLocked(c)
	case http.StateIdle:
		// Kept alive between requests: pre-auth again, and when their
		// budget is full it is made room for as a new connection would.
		if c.preAuth == nil && !c.released && l.nPreAuth >= l.cfg.MaxPreAuthConns {
			if victim = l.victimLocked(c.addr); victim == nil {
				victim = c // it holds as many as any: it gives way itself
			}
			l.evicted++
			l.releaseLocked(victim)
		}
		l.enterPreAuthLocked(c)
	}
	l.mu.Unlock()
	if victim != nil {
		victim.Conn.Close()
	}
}

// own is the Listener's connection under nc (a TLS connection wraps
// it), or nil.
func (l *Listener) own(nc net.Conn) *limitedConn {
	for range 4 {
		switch c := nc.(type) {
		case *limitedConn:
			if c.l != l {
				return nil
			}
			return c
		case interface{ NetConn() net.Conn }:
			nc = c.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// descriptorsLow says why no connection may be accepted when fewer than
// the headroom of descriptors are free, counting the one just accepted.
func (l *Listener) descriptorsLow() string {
	if l.cfg.FDHeadroom <= 0 {
		return ""
	}
	headroom := int64(l.cfg.FDHeadroom)
	l.fdMu.Lock()
	defer l.fdMu.Unlock()
	if l.freeFDs > 4*headroom && time.Since(l.countedAt) < fdRecount {
		return ""
	}
	limit, err := l.fileLimit()
	if err != nil {
		return err.Error()
	}
	open, err := l.openFiles()
	if err != nil {
		l.freeFDs = 0
		return "cannot count open descriptors: " + err.Error() // EMFILE itself, most likely
	}
	l.freeFDs, l.countedAt = int64(limit)-int64(open), time.Now()
	if l.freeFDs <= headroom {
		return fmt.Sprintf("%d of %d descriptors free, within the headroom of %d kept for starts", l.freeFDs, limit, headroom)
	}
	return ""
}

// refuse counts a refused connection; the log hears of refusals at most
// every 10 seconds, so a flood cannot flood it too.
func (l *Listener) refuse(addr, why string) {
	l.mu.Lock()
	l.refused++
	n, warn := l.refused, time.Since(l.lastWarned) >= 10*time.Second
	if warn {
		l.lastWarned = time.Now()
	}
	l.mu.Unlock()
	if warn {
		l.log.Warn("connection refused", "remote_addr", addr, "reason", why, "refused_total", n)
	}
}

// releaseLocked gives c's place back, once.
func (l *Listener) releaseLocked(c *limitedConn) {
	if c.released {
		return
	}
	c.released = true
	l.leavePreAuthLocked(c)
	l.open--
	if l.byAddr[c.addr]--; l.byAddr[c.addr] <= 0 {
		delete(l.byAddr, c.addr)
	}
}

// Stats counts the open and refused connections.
func (l *Listener) Stats() ListenerStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ListenerStats{Open: l.open, PreAuth: l.nPreAuth, Refused: l.refused,
		RefusedConns: l.refusedBy[0], RefusedAddr: l.refusedBy[1], RefusedFDs: l.refusedBy[2], RefusedPreAuth: l.refusedBy[3],
		Evicted: l.evicted, FirstByteTimeouts: l.timedOut}
}

// limitedConn gives its place back once, on the first Close (or when it
// is evicted); until its first byte a timer may close it.
type limitedConn struct {
	net.Conn
	l         *Listener
	addr      string
	firstByte *time.Timer // nil once a byte came, or without a timeout
	gotByte   atomic.Bool

	// Guarded by l.mu.
	preAuth  *list.Element // in l.preAuth[addr] while pre-auth
	released bool
}

func (c *limitedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.gotByte.Load() {
		c.gotByte.Store(true)
		if t := c.firstByte; t != nil {
			t.Stop()
		}
	}
	return n, err
}

// firstByteExpired closes the connection when it has sent nothing.
func (c *limitedConn) firstByteExpired() {
	if c.gotByte.Load() {
		return
	}
	c.l.mu.Lock()
	if c.released { // closed or evicted already
		c.l.mu.Unlock()
		return
	}
	c.l.timedOut++
	c.l.releaseLocked(c)
	c.l.mu.Unlock()
	c.Conn.Close()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	if c.firstByte != nil {
		c.firstByte.Stop()
	}
	if c.l != nil {
		c.l.mu.Lock()
		c.l.releaseLocked(c)
		c.l.mu.Unlock()
	}
	return err
}

// clientAddr is the client a remote address counts as, without the port:
// one client opens many connections from many ports, and holds a whole
// network: an IPv4 /24 (what one host or a small site is routed, where
// NAT puts many hosts behind one address anyway), an IPv6 /64.
func clientAddr(a net.Addr) string {
	var ip net.IP
	if tcp, ok := a.(*net.TCPAddr); ok {
		ip = tcp.IP
	} else if host, _, err := net.SplitHostPort(a.String()); err == nil {
		ip = net.ParseIP(host)
	}
	switch {
	case ip == nil:
		return a.String()
	case ip.To4() == nil:
		// One IPv6 client holds a whole /64: counting each address apart
		// would give it no cap at all.
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.To4().Mask(net.CIDRMask(24, 32)).String() + "/24"
}

// fileLimit is the soft RLIMIT_NOFILE, the one open(2) fails at.
func fileLimit() (uint64, error) {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		return 0, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	return r.Cur, nil
}
