package gateway

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// acceptor runs a Listener's accept loop and keeps what it accepted.
type acceptor struct {
	l    *Listener
	mu   sync.Mutex
	got  []net.Conn
	done chan struct{}
}

func newAcceptor(t *testing.T, cfg ListenerConfig, tweak func(*Listener)) *acceptor {
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
	a := &acceptor{l: l, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
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
	before := a.accepted()
	c, err := net.DialTimeout("tcp", a.l.Addr().String(), 10*time.Second)
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

// TestOpenFilesCounts runs alone (not parallel), so the files it opens
// are the only change in the count. Both ways of counting must see them,
// and agree.
func TestOpenFilesCounts(t *testing.T) {
	counts := func() (stat, list int) {
		t.Helper()
		stat, err := countOpenFiles()
		if err == nil {
			list, err = listOpenFiles()
		}
		if err != nil {
			t.Fatal(err)
		}
		return stat, list
	}
	before, listedBefore := counts()
	dir := t.TempDir()
	for i := range 20 {
		f, err := os.Create(filepath.Join(dir, string(rune('a'+i))))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
	}
	after, listed := counts()
	if after < before+20 || listed < listedBefore+20 {
		t.Fatalf("%d (listed: %d) open before 20 more, %d (%d) after", before, listedBefore, after, listed)
	}
	if after != listed {
		t.Errorf("counted %d open, listed %d", after, listed)
	}
}

// BenchmarkCountOpenFiles counts with as many descriptors open as 1,000
// attached shells hold.
func BenchmarkCountOpenFiles(b *testing.B) {
	for range 4000 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
	}
	for b.Loop() {
		if _, err := countOpenFiles(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestClientAddrCountsAnIPv6ClientAsItsPrefix: the per-address cap holds
// a /64 as one client, which it is to any IPv6 host.
func TestClientAddrCountsAnIPv6ClientAsItsPrefix(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 1}, "127.0.0.1"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2::1"), Port: 1}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:ffff::9"), Port: 2}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:127.0.0.2"), Port: 3}, "127.0.0.2"},
	} {
		if got := clientAddr(c.addr); got != c.want {
			t.Errorf("clientAddr(%v) = %q, want %q", c.addr, got, c.want)
		}
	}
}
