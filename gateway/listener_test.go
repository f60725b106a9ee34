package gateway

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// acceptor runs a Listener's accept loop and keeps what it accepted.
// Each connection is taken as having sent its request header
// (http.StateActive), as a server's would be, unless preAuth.
type acceptor struct {
	l       *Listener
	preAuth bool
	mu      sync.Mutex
	got     []net.Conn
	done    chan struct{}
}

func newAcceptor(t *testing.T, cfg ListenerConfig, tweak func(*Listener)) *acceptor {
	return startAcceptor(t, cfg, tweak, false)
}

func startAcceptor(t *testing.T, cfg ListenerConfig, tweak func(*Listener), preAuth bool) *acceptor {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewListener(raw, cfg)
	if err != nil {
		raw.Close()
		t.Fatal(err)
	}
	if tweak != nil {
		tweak(l)
	}
	a := &acceptor{l: l, preAuth: preAuth, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			l.ConnState(c, http.StateNew)
			if !a.preAuth {
				l.ConnState(c, http.StateActive)
			}
			a.mu.Lock()
			a.got = append(a.got, c)
			a.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-a.done
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, c := range a.got {
			c.Close()
		}
	})
	return a
}

func (a *acceptor) accepted() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.got)
}

// closeOne closes the first accepted connection still open.
func (a *acceptor) closeOne() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got[0].Close()
	a.got = a.got[1:]
}

// dial connects and waits until the listener accepted or refused it:
// refused reports whether the server closed the connection.
func (a *acceptor) dial(t *testing.T) (c net.Conn, refused bool) {
	t.Helper()
	return a.dialFrom(t, "127.0.0.1")
}

// dialFrom is dial from the local address local (any of 127/8).
func (a *acceptor) dialFrom(t *testing.T, local string) (c net.Conn, refused bool) {
	t.Helper()
	before := a.accepted()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", a.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// A refused connection is closed at once; an accepted one is counted.
	// Either happens promptly, so the loop is bounded in time.
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		if a.accepted() > before {
			return c, false
		}
		_, err := c.Read(make([]byte, 1))
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
			return c, true
		}
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	}
	t.Fatal("a connection was neither accepted nor refused within 20s")
	return nil, false
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

func TestListenerCapsConnections(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		cfg  ListenerConfig
	}{
		{"in total", ListenerConfig{MaxConns: 2, MaxConnsPerAddr: 100}},
		{"per client address", ListenerConfig{MaxConns: 100, MaxConnsPerAddr: 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := newAcceptor(t, tt.cfg, nil)
			for i := range 2 {
				if _, refused := a.dial(t); refused {
					t.Fatalf("connection %d refused below the cap", i)
				}
			}
			if _, refused := a.dial(t); !refused {
				t.Fatal("a third connection was accepted beyond a cap of 2")
			}
			a.closeOne() // a closed connection gives its place back
			if _, refused := a.dial(t); refused {
				t.Fatal("refused after a connection closed")
			}
			if st := a.l.Stats(); st.Open != 2 || st.Refused != 1 {
				t.Fatalf("stats %+v, want 2 open and 1 refused", st)
			}
		})
	}
}

// TestListenerKeepsDescriptorHeadroom: while fewer descriptors than the
// headroom are free, new connections are refused, so starts still get
// theirs; once some are free again connections are accepted.
func TestListenerKeepsDescriptorHeadroom(t *testing.T) {
	t.Parallel()
	var open atomic.Int64
	a := newAcceptor(t, ListenerConfig{FDHeadroom: 100}, func(l *Listener) {
		l.fileLimit = func() (uint64, error) { return 1000, nil }
		l.openFiles = func() (int, error) { return int(open.Load()), nil }
	})
	open.Store(899)
	if _, refused := a.dial(t); refused {
		t.Fatal("refused with 101 descriptors free")
	}
	open.Store(900)
	if _, refused := a.dial(t); !refused {
		t.Fatal("accepted with only the headroom of 100 descriptors free")
	}
	open.Store(400)
	if _, refused := a.dial(t); refused {
		t.Fatal("refused once descriptors were free again")
	}
}

func TestNewListenerRefusesHeadroomAboveTheLimit(t *testing.T) {
	t.Parallel()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := NewListener(raw, ListenerConfig{FDHeadroom: 1 << 30}); err == nil {
		t.Fatal("a headroom above RLIMIT_NOFILE was accepted")
	}
}

// TestClientAddrCountsAClientAsItsPrefix: the per-address cap holds an
// IPv6 /64 as one client, which it is to any IPv6 host, and an IPv4 /24.
func TestClientAddrCountsAClientAsItsPrefix(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 1}, "127.0.0.0/24"},
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.200"), Port: 1}, "192.0.2.0/24"},
		{&net.TCPAddr{IP: net.ParseIP("192.0.3.1"), Port: 1}, "192.0.3.0/24"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2::1"), Port: 1}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:ffff::9"), Port: 2}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:127.0.0.2"), Port: 3}, "127.0.0.0/24"},
	} {
		if got := clientAddr(c.addr); got != c.want {
			t.Errorf("clientAddr(%v) = %q, want %q", c.addr, got, c.want)
		}
	}
}

// TestListenerPreAuthBudget: connections that have sent no request
// header have a budget of their own; when it is full a client holding
// fewer of them takes the place of the oldest of the client holding the
// most, and that client's own new ones are refused. A connection that
// sent its header leaves the budget, and one kept alive between
// requests enters it again.
func TestListenerPreAuthBudget(t *testing.T) {
	t.Parallel()
	a := startAcceptor(t, ListenerConfig{MaxConns: 10, MaxConnsPerAddr: 10, MaxPreAuthConns: 3, FirstByteTimeout: -1}, nil, true)
	var idle []net.Conn
	for i := range 3 {
		c, refused := a.dialFrom(t, "127.1.0.1")
		if refused {
			t.Fatalf("idle connection %d refused within the budget", i)
		}
		idle = append(idle, c)
	}
	if _, refused := a.dialFrom(t, "127.1.0.2"); !refused { // the same /24
		t.Fatal("a fourth idle connection of the client holding them all was accepted")
	}
	if _, refused := a.dialFrom(t, "127.2.0.1"); refused {
		t.Fatal("another client was refused while the budget was full of one client's idle connections")
	}
	if !closedByServer(t, idle[0]) {
		t.Fatal("the oldest idle connection was not closed to make room")
	}
	if st := a.l.Stats(); st.Open != 3 || st.PreAuth != 3 || st.Evicted != 1 || st.RefusedPreAuth != 1 {
		t.Fatalf("stats %+v, want 3 open, 3 pre-auth, 1 evicted, 1 refused", st)
	}
	a.mu.Lock()
	active, kept := a.got[len(a.got)-1], a.got[1]
	a.mu.Unlock()
	a.l.ConnState(active, http.StateActive)
	a.l.ConnState(kept, http.StateActive)
	if st := a.l.Stats(); st.PreAuth != 1 {
		t.Fatalf("stats %+v, want 1 pre-auth after two sent their header", st)
	}
	a.l.ConnState(kept, http.StateIdle)
	if st := a.l.Stats(); st.PreAuth != 2 || st.Open != 3 {
		t.Fatalf("stats %+v, want the kept-alive one pre-auth again", st)
	}
}

// TestListenerFirstByteTimeout: a connection that sends nothing is
// closed after FirstByteTimeout and gives its place back; one that sent
// a byte is left to the server's header timeout.
func TestListenerFirstByteTimeout(t *testing.T) {
	t.Parallel()
	a := startAcceptor(t, ListenerConfig{MaxConns: 10, MaxConnsPerAddr: 10, FirstByteTimeout: 200 * time.Millisecond}, nil, true)
	silent, _ := a.dial(t)
	talker, _ := a.dial(t)
	talker.Write([]byte("G"))
	a.mu.Lock()
	server := a.got[1]
	a.mu.Unlock()
	if n, err := server.Read(make([]byte, 1)); n != 1 {
		t.Fatalf("read the first byte: %v", err)
	}
	if !closedByServer(t, silent) {
		t.Fatal("a silent connection was not closed")
	}
	if st := a.l.Stats(); st.FirstByteTimeouts != 1 || st.Open != 1 {
		t.Fatalf("stats %+v, want 1 timed out and 1 open", st)
	}
}

// closedByServer waits (at most 20s) for the server to close c.
func closedByServer(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF) || isReset(err)
}
