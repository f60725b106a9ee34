package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults of ListenerConfig.
const (
	DefaultMaxConns        = 4096
	DefaultMaxConnsPerAddr = 256
	DefaultFDHeadroom      = 128
)

// ListenerConfig bounds the connections a Listener lets in. Zero fields
// take the defaults.
type ListenerConfig struct {
	// MaxConns bounds the open connections, authenticated or not.
	MaxConns int
	// MaxConnsPerAddr bounds the open connections from one client IP
	// address (behind a reverse proxy, every client has the proxy's).
	MaxConnsPerAddr int
	// FDHeadroom is how many file descriptors below RLIMIT_NOFILE are kept
	// for starting executions: while fewer are free, new connections are
	// refused. Negative turns the check off.
	FDHeadroom int
	Logger     *slog.Logger
}

// ListenerStats counts a Listener's connections.
type ListenerStats struct {
	Open    int    `json:"open"`
	Refused uint64 `json:"refused"`
	// The refused connections by the bound they met: MaxConns,
	// MaxConnsPerAddr, FDHeadroom.
	RefusedConns uint64 `json:"refused_conns"`
	RefusedAddr  uint64 `json:"refused_addr"`
	RefusedFDs   uint64 `json:"refused_fds"`
}

// Listener is a net.Listener that refuses connections beyond its bounds:
// it accepts each one and closes it at once, so a refused client learns
// promptly instead of waiting in the kernel's backlog. Its connections
// give their place back when closed, hijacked ones included.
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
	refused    uint64
	refusedBy  [3]uint64 // by MaxConns, MaxConnsPerAddr, FDHeadroom
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
	def(&cfg.FDHeadroom, DefaultFDHeadroom)
	if cfg.MaxConns < 0 || cfg.MaxConnsPerAddr < 0 {
		return nil, errors.New("gateway: listener: negative connection cap")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Listener{Listener: ln, cfg: cfg, log: cfg.Logger, byAddr: map[string]int{}, openFiles: countOpenFiles, fileLimit: fileLimit}
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
		addr := clientAddr(c.RemoteAddr())
		if why := l.admit(addr); why != "" {
			c.Close()
			l.refuse(addr, why)
			continue
		}
		return &limitedConn{Conn: c, l: l, addr: addr}, nil
	}
}

// admit takes a place for a connection from addr, or says why not.
func (l *Listener) admit(addr string) string {
	if why := l.descriptorsLow(); why != "" {
		l.mu.Lock()
		l.refusedBy[2]++
		l.mu.Unlock()
		return why
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.open >= l.cfg.MaxConns:
		l.refusedBy[0]++
		return fmt.Sprintf("%d connections open, the maximum", l.open)
	case l.byAddr[addr] >= l.cfg.MaxConnsPerAddr:
		l.refusedBy[1]++
		return fmt.Sprintf("%d connections open from this address, the maximum", l.byAddr[addr])
	}
	l.open++
	l.byAddr[addr]++
	return ""
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

func (l *Listener) release(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
		delete(l.byAddr, addr)
	}
}

// Stats counts the open and refused connections.
func (l *Listener) Stats() ListenerStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ListenerStats{Open: l.open, Refused: l.refused,
		RefusedConns: l.refusedBy[0], RefusedAddr: l.refusedBy[1], RefusedFDs: l.refusedBy[2]}
}

// limitedConn gives its place back once, on the first Close.
type limitedConn struct {
	net.Conn
	l    *Listener
	addr string
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.addr) })
	return err
}

// clientAddr is the IP of a remote address, without the port: one
// client opens many connections from many ports.
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
	return ip.String()
}

// countOpenFiles counts the process's open descriptors. Since Linux 6.2
// the size stat gives /proc/self/fd is that count, taken from the
// descriptor table without listing it: 1.3-1.8 ms with 4,000 open becomes
// about 1.5 µs. Older kernels give 0, and then it lists them.
func countOpenFiles() (int, error) {
	fi, err := os.Stat("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	if fi.Size() > 0 {
		return int(fi.Size()), nil
	}
	return listOpenFiles()
}

// listOpenFiles lists /proc/self/fd, less the descriptor reading it.
func listOpenFiles() (int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, err
	}
	return len(names) - 1, nil
}

// fileLimit is the soft RLIMIT_NOFILE, the one open(2) fails at.
func fileLimit() (uint64, error) {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		return 0, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	return r.Cur, nil
}
