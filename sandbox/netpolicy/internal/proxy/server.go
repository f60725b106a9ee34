package proxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// The limits a Server holds its clients to. The durations and MaxConns
// are the defaults of the Server's fields of the same name.
const (
	// MaxHeaderBytes bounds an HTTP request's line and header together;
	// a longer one is answered 431.
	MaxHeaderBytes = 16 << 10
	// DefaultHandshakeTimeout bounds the time from accept to the end of
	// the handshake: a SOCKS5 request, or an HTTP request's head. A
	// client that sends nothing, or sends slowly, is dropped after it.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultKeepAliveTimeout bounds how long an HTTP connection between
	// two forwarded requests waits for the next one.
	DefaultKeepAliveTimeout = 2 * time.Minute
	// DefaultDialTimeout bounds one Dial.
	DefaultDialTimeout = 30 * time.Second
	// DefaultMaxConns bounds the client connections served at once.
	DefaultMaxConns = 1024
	// busyBacklog bounds the connections being told that the Server is
	// full at once; beyond it a new connection is closed unanswered.
	busyBacklog = 16
	// readBufferSize is each client connection's and each forwarded
	// target's read (and write) buffer. A spliced connection keeps none.
	readBufferSize = 4 << 10
	// lingerTimeout and lingerBytes bound the reading of what a client
	// still sends after an error answer (clientConn.linger).
	lingerTimeout = 500 * time.Millisecond
	lingerBytes   = 256 << 10
)

// ErrClosed is returned by Serve once Close was called, and is the
// Record.Err of a connection whose Dial the Close interrupted.
var ErrClosed = errors.New("proxy: server closed")

// ErrBusy is the Record.Err of a connection refused because MaxConns
// were being served: it was answered 503, or with SOCKS5's general
// failure.
var ErrBusy = errors.New("proxy: too many connections")

// Refuser is implemented by a Dialer that wants to hear of a connection
// the Server refused without asking it: a synthetic address that stands
// for no name any longer (ServeTransparent, ServeUDP), with the network
// ("tcp" or "udp") and the reason.
type Refuser interface {
	Refuse(network, host string, port uint16, reason string)
}

// Dialer connects to a target for the program, or refuses. It is the
// only place a Server asks whether a connection may be made.
type Dialer interface {
	// Dial connects to host (a name, or an IPv4 or IPv6 address without
	// brackets, as the program gave it; an IPv4-mapped IPv6 address from
	// SOCKS5 comes as IPv4) and port. It returns a *Refused
	// for a connection the policy refuses. ctx ends at the Server's
	// DialTimeout or Close.
	Dial(ctx context.Context, host string, port uint16) (net.Conn, error)
}

// Refused is the error a Dialer returns for a connection its policy
// refuses. Reason is shown to the program: the body of an HTTP 403, and
// the Record's Refused.
type Refused struct{ Reason string }

// Error returns the Reason.
func (r *Refused) Error() string { return r.Reason }

// Protocol names the way a program asked for a connection.
type Protocol string

// The protocols a Server speaks.
const (
	HTTPConnect Protocol = "http-connect" // HTTP CONNECT, then the bytes as they are
	HTTPForward Protocol = "http"         // plain HTTP requests in absolute form
	SOCKS5      Protocol = "socks5"       // RFC 1928 CONNECT
	// Transparent is a connection the program made to an address of its
	// own choosing, which its sandbox's redirect sent to a listener
	// served by ServeTransparent.
	Transparent Protocol = "transparent"
)

// Record describes a connection to a target once it ended, or a request
// for one that was not made. A plain-HTTP client connection that
// reaches several targets in turn makes one Record per target
// connection.
type Record struct {
	Protocol Protocol
	Host     string // as the program named it
	Port     uint16
	// Up counts the bytes from the program to the target, Down those
	// back; for HTTPForward they are the target's whole exchange
	// (request and response heads included).
	Up, Down int64
	// Dropped counts the bytes of datagrams a UDP flow could not pass
	// on: the flow's queue or the program's socket was full, the relay
	// had MaxUDPFlows, the flow's target was never connected, or its
	// destination was unknown. TCP never drops.
	Dropped int64
	// Refused is the Dialer's Refused.Reason when it refused.
	Refused string
	// Target is the connection the Dialer returned, closed by now; nil
	// when none was made. A Dialer that keeps something per connection
	// finds it by this key.
	Target net.Conn
	// Err is why no connection was made when the Dialer failed other
	// than by refusing (ErrBusy and ErrClosed among them); nil once a
	// connection was made or refused.
	Err error
}

// Server serves HTTP CONNECT, plain HTTP proxying and SOCKS5 on the
// listeners given to Serve, and connects through its Dialer. Set the
// fields before the first Serve; zero values take the defaults. Its
// methods are safe for concurrent use.
type Server struct {
	// Dialer connects to targets; it must be set.
	Dialer Dialer
	// MaxConns bounds the client connections served at once
	// (DefaultMaxConns if 0). A client beyond it is answered 503, or
	// with SOCKS5's general failure, and closed.
	MaxConns int
	// HandshakeTimeout (DefaultHandshakeTimeout if 0), KeepAliveTimeout
	// (DefaultKeepAliveTimeout) and DialTimeout (DefaultDialTimeout) are
	// described at the constants. A spliced connection has no idle
	// timeout: a long-lived one is legitimate.
	HandshakeTimeout time.Duration
	KeepAliveTimeout time.Duration
	DialTimeout      time.Duration
	// UDPIdleTimeout (DefaultUDPIdleTimeout if 0) ends a UDP flow
	// (ServeUDP); a longer one than conntrack's hold of a UDP entry (30
	// s) would let a flow outlive the entry that names its destination.
	UDPIdleTimeout time.Duration
	// Done, if set, is called once per Record, on the connection's
	// goroutine (so Close waits for it too); it should not block.
	Done func(Record)
	// Names, if set, tells ServeTransparent the name a synthetic address
	// stands for: the address a DNS stub answered for that name. fake is
	// true for an address of the stub's pool, with the name it holds, or
	// "" when it holds none (any longer); false for any other address,
	// which is then asked of the Dialer as itself.
	Names func(addr netip.Addr) (name string, fake bool)

	mu        sync.Mutex
	ctx       context.Context // canceled by Close
	cancel    context.CancelFunc
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{} // clients' and targets'
	active    int                   // clients served
	busy      int                   // clients being told the Server is full
	wg        sync.WaitGroup        // one per client connection
}

// Serve accepts connections on l until Close, and serves each on a
// goroutine of its own. It returns ErrClosed after Close, or the
// listener's error. l is closed when Serve returns.
func (s *Server) Serve(l net.Listener) error { return s.serve(l, false) }

// ServeTransparent accepts connections on l, a listener that a sandbox's
// redirect sends the program's outside TCP connections to, until Close,
// like Serve; see the package doc for what it does with them.
func (s *Server) ServeTransparent(l net.Listener) error { return s.serve(l, true) }

func (s *Server) serve(l net.Listener, transparent bool) error {
	if !s.addListener(l) {
		l.Close()
		return ErrClosed
	}
	defer s.removeListener(l)
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrClosed
			}
			if !retryable(err) {
				return err
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			if !s.sleep(backoff) {
				return ErrClosed
			}
			continue
		}
		backoff = 0
		s.start(c, transparent)
	}
}

// Close closes the listeners and every connection, waits for their
// goroutines to end, and returns nil. It may be called more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	s.init()
	if !s.closed {
		s.closed = true
		s.cancel()
		for l := range s.listeners {
			l.Close()
		}
		for c := range s.conns {
			c.Close()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// init makes the maps and the context; s.mu is held.
func (s *Server) init() {
	if s.ctx == nil {
		s.ctx, s.cancel = context.WithCancel(context.Background())
		s.listeners = make(map[net.Listener]struct{})
		s.conns = make(map[net.Conn]struct{})
	}
}

func (s *Server) addListener(l net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	if s.closed {
		return false
	}
	s.listeners[l] = struct{}{}
	return true
}

func (s *Server) removeListener(l net.Listener) {
	s.mu.Lock()
	delete(s.listeners, l)
	s.mu.Unlock()
	l.Close()
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// sleep waits d, or less when Close is called; it reports whether the
// Server is still open.
func (s *Server) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// retryable reports whether an Accept error passes: a shortage of file
// descriptors or memory, or a connection reset before it was accepted.
func retryable(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// start serves c on a goroutine of its own, or tells it the Server is
// full, or closes it when even that backlog is full.
func (s *Server) start(c net.Conn, transparent bool) {
	s.mu.Lock()
	busy := s.active >= s.maxConns()
	switch {
	case s.closed || busy && s.busy >= busyBacklog:
		s.mu.Unlock()
		c.Close()
		return
	case busy:
		s.busy++
	default:
		s.active++
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go s.serveConn(c, busy, transparent)
}

// serveConn serves one client connection; the protocol is told by its
// first byte, unless it is transparent.
func (s *Server) serveConn(c net.Conn, busy, transparent bool) {
	defer s.wg.Done()
	defer s.release(c, busy)
	c.SetDeadline(time.Now().Add(s.handshakeTimeout()))
	if transparent {
		(&clientConn{s: s, c: c, busy: busy}).serveTransparent()
		return
	}
	lr := &headLimiter{r: c}
	h := &clientConn{s: s, c: c, lr: lr, br: bufio.NewReaderSize(lr, readBufferSize), busy: busy}
	lr.limit() // the first request's head, read ahead by Peek
	first, err := h.br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == socksVersion {
		lr.unlimit() // SOCKS5 bounds its own messages
		h.serveSOCKS()
	} else {
		h.serveHTTP()
	}
}

// release closes and forgets a client connection.
func (s *Server) release(c net.Conn, busy bool) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	if busy {
		s.busy--
	} else {
		s.active--
	}
	s.mu.Unlock()
}

// track adds a target's connection to those Close closes; false means
// the Server is closed and c must not be used.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// untrack closes and forgets a target's connection.
func (s *Server) untrack(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *Server) maxConns() int {
	if s.MaxConns > 0 {
		return s.MaxConns
	}
	return DefaultMaxConns
}

func (s *Server) handshakeTimeout() time.Duration {
	return orDefault(s.HandshakeTimeout, DefaultHandshakeTimeout)
}

func (s *Server) keepAliveTimeout() time.Duration {
	return orDefault(s.KeepAliveTimeout, DefaultKeepAliveTimeout)
}

func (s *Server) dialTimeout() time.Duration {
	return orDefault(s.DialTimeout, DefaultDialTimeout)
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func (s *Server) record(r Record) {
	if s.Done != nil {
		s.Done(r)
	}
}
