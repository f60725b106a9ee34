package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/fdio"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session/sessiontest"
	"golang.org/x/sys/unix"
)

// shortSocket is a socket for nbConn that takes a random part of each
// non-blocking write and, on a blocking one, everything after random
// pauses; or fails the blocking write as past its deadline (stall).
type shortSocket struct {
	net.Conn // nil: only Write, SetWriteDeadline and Close are used
	mu       sync.Mutex
	rnd      *rand.Rand
	out      bytes.Buffer
	stall    bool
}

func (s *shortSocket) try(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.rnd.IntN(len(p) + 1)
	if s.rnd.IntN(4) == 0 {
		n = len(p)
	}
	s.out.Write(p[:n])
	return n, nil
}

func (s *shortSocket) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stall {
		return 0, os.ErrDeadlineExceeded
	}
	s.out.Write(p)
	return len(p), nil
}

func (s *shortSocket) SetWriteDeadline(time.Time) error { return nil }
func (s *shortSocket) Close() error                     { return nil }

// TestNBConnKeepsOrderUnderShortWrites: whatever part of each write the
// socket takes at once, the bytes leave whole and in order, and each
// drained backlog is reported.
func TestNBConnKeepsOrderUnderShortWrites(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		sock := &shortSocket{rnd: rand.New(rand.NewPCG(seed, 1))}
		nb := &nbConn{Conn: sock, try: sock.try, timeout: time.Second}
		drained := make(chan struct{}, 1)
		nb.notify(func() {
			select {
			case drained <- struct{}{}:
			default:
			}
		}, func(err error) { t.Errorf("seed %d: stalled: %v", seed, err) })
		rnd := rand.New(rand.NewPCG(seed, 2))
		var want bytes.Buffer
		for i := range 2000 {
			p := make([]byte, 1+rnd.IntN(3000))
			for j := range p {
				p[j] = byte(i + j)
			}
			want.Write(p)
			if n, err := nb.Write(p); n != len(p) || err != nil {
				t.Fatalf("seed %d: write %d: %d, %v", seed, i, n, err)
			}
		}
		waitDrained(t, nb, drained)
		sock.mu.Lock()
		got := sock.out.Bytes()
		sock.mu.Unlock()
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("seed %d: %d bytes out of %d written, not the same", seed, len(got), want.Len())
		}
		nb.Close()
	}
}

// waitDrained waits, a bounded number of times, until nb has no backlog.
func waitDrained(t *testing.T, nb *nbConn, drained <-chan struct{}) {
	t.Helper()
	for range 1000 {
		nb.mu.Lock()
		flushing := nb.flushing
		nb.mu.Unlock()
		if !flushing {
			return
		}
		select {
		case <-drained:
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("the backlog was never written")
}

// TestNBConnStalls: a backlog the socket does not take within the
// timeout is reported once, and every later write fails.
func TestNBConnStalls(t *testing.T) {
	t.Parallel()
	sock := &shortSocket{rnd: rand.New(rand.NewPCG(1, 1)), stall: true}
	nb := &nbConn{Conn: sock, try: func([]byte) (int, error) { return 0, nil }, timeout: time.Second}
	stalled := make(chan error, 2)
	nb.notify(func() {}, func(err error) { stalled <- err })
	if _, err := nb.Write([]byte("never taken")); err != nil {
		t.Fatal(err)
	}
	if err := <-stalled; !errors.Is(err, errBacklogStalled) {
		t.Fatalf("stalled with %v", err)
	}
	nb.done.Wait()
	if _, err := nb.Write([]byte("more")); !errors.Is(err, errBacklogStalled) {
		t.Fatalf("a write after the stall: %v", err)
	}
	if len(stalled) != 0 {
		t.Fatal("the stall was reported twice")
	}
	nb.Close()
}

// TestOutputNeverWaitsForAClientThatStopsReading: a client that stops
// reading, with a small socket buffer, never blocks the execution's
// output (the ring's callback writes on its goroutine): the program
// writes all it has, the connection's backlog stays bounded, and the
// connection is closed as too slow (1013) after the write timeout.
func TestOutputNeverWaitsForAClientThatStopsReading(t *testing.T) {
	t.Parallel()
	const chunks, chunk = 4096, 4 << 10 // 16 MiB, far over any socket buffer
	wrote := make(chan int, 1)
	typed := make(chan struct{})
	l := &sessiontest.Launcher{}
	l.Script = func(p *sessiontest.Proc) sandbox.Exit {
		<-typed
		b := bytes.Repeat([]byte("y"), chunk)
		n := 0
		for range chunks {
			if _, err := p.Out().Stdout.Write(b); err != nil {
				break
			}
			n++
		}
		wrote <- n
		return sessiontest.UntilStopped(p)
	}
	e := newFakeEnv(t, l, func(c *Config) { c.WriteTimeout = 300 * time.Millisecond })
	c := e.dialSmall(t, e.token(t, "acme", allScopes...))
	defer c.ws.CloseNow()
	c.expect(t, wire.MsgHello)
	// Live: once the stalled client is closed, a held execution would park
	// its output for the writer who left (by design), and a program slower
	// than the write timeout (a busy machine) would wait for it. Live
	// leaves only what this tests: the ring's callback writing inline.
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "flood", Command: "/bin/sh", Attach: true, Flow: wire.FlowLive})
	c.expect(t, wire.MsgStarted)
	c.expect(t, wire.MsgAttached)
	sc := serverConn(t, e)
	if sc.w.nb == nil {
		t.Fatal("a TCP connection has no non-blocking writer")
	}
	close(typed) // the client reads no more
	select {
	case n := <-wrote:
		if n != chunks {
			t.Fatalf("the program wrote %d of %d chunks", n, chunks)
		}
	case <-time.After(time.Minute):
		t.Fatal("the program's output waited for the client")
	}
	// A round under way may add one batch past the bound: when the
	// writer fell behind (a busy machine), up to 256 KiB of data in up to
	// 256 frames (replay.Cursor.Next), not the chunk or two of a quiet one.
	if m := backlogHeld(sc.w.nb); m > backlogBound+256<<10+256*64 {
		t.Fatalf("the backlog holds %d bytes", m)
	}
	select {
	case <-sc.ctx.Done():
	case <-time.After(time.Minute):
		t.Fatal("the stalled client was never closed")
	}
	if code := sc.shut.code.Load(); code != int32(websocket.StatusTryAgainLater) {
		t.Fatalf("closed with %d, want 1013", code)
	}
}

// serverConn is the one connection e serves.
func serverConn(t *testing.T, e *testEnv) *conn {
	t.Helper()
	e.srv.mu.Lock()
	defer e.srv.mu.Unlock()
	for c := range e.srv.conns {
		return c
	}
	t.Fatal("no connection")
	return nil
}

// backlogHeld is what nb holds unwritten.
func backlogHeld(nb *nbConn) int {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	return len(nb.backlog)
}

// TestEchoIsInTheSocketWhenTheOutputWriteReturns: output is written to
// the client on the goroutine that appended it (the ring's callback), so
// each keystroke's echo is in the client's socket by the time the
// program's write returns, with no goroutine left to schedule.
func TestEchoIsInTheSocketWhenTheOutputWriteReturns(t *testing.T) {
	t.Parallel()
	const keys = 20
	var client atomic.Pointer[net.TCPConn]
	queued := make(chan int, keys) // what the client's socket held, per key
	next := make(chan struct{})    // the client read the key's echo
	done := make(chan struct{})    // the test ended
	l := &sessiontest.Launcher{}
	l.Script = func(p *sessiontest.Proc) sandbox.Exit {
		for i := range keys + 1 {
			select {
			case <-next: // nothing else is being written
			case <-done:
				return sessiontest.UntilStopped(p)
			}
			if i == keys {
				break
			}
			if _, err := p.Out().Stdout.Write([]byte{byte('a' + i)}); err != nil {
				break
			}
			queued <- socketQueued(t, client.Load())
		}
		return sessiontest.UntilStopped(p)
	}
	e := newFakeEnv(t, l, nil)
	t.Cleanup(func() { close(done) }) // runs before e's
	opts := &websocket.DialOptions{Subprotocols: []string{wire.Subprotocol}, HTTPHeader: http.Header{}, HTTPClient: &http.Client{
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				client.Store(nc.(*net.TCPConn))
			}
			return nc, err
		}},
	}}
	opts.HTTPHeader.Set("Authorization", "Bearer "+e.token(t, "acme", allScopes...))
	c, _, err := e.dialRaw("", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.ws.CloseNow()
	c.expect(t, wire.MsgHello)
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "echo", Command: "/bin/sh", Attach: true})
	c.expect(t, wire.MsgStarted)
	c.expect(t, wire.MsgAttached)
	if m, _ := c.expect(t, wire.MsgEvent); m.Event != "started" {
		t.Fatalf("the first event is %q", m.Event)
	}
	sc := serverConn(t, e)
	for i := 0; i < 1000 && sc.w.writing.Load(); i++ {
		time.Sleep(time.Millisecond) // the writer of the event finishes its round
	}
	next <- struct{}{}
	for i := range keys {
		if n := <-queued; n == 0 {
			t.Fatalf("key %d: its echo was not in the client's socket when the write returned", i)
		}
		if got := c.readOutput(t); got != string(rune('a'+i)) {
			t.Fatalf("key %d: got %q, want its echo", i, got)
		}
		next <- struct{}{}
	}
}

// readOutput reads the next output message, past control messages.
func (c *client) readOutput(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 100 {
		f, err := c.read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if f.out != nil {
			return string(f.out.Data)
		}
		t.Logf("before the output: %+v", *f.msg)
	}
	t.Fatal("no output in 100 messages")
	return ""
}

// socketQueued is how many bytes wait unread in nc's receive queue.
func socketQueued(t *testing.T, nc *net.TCPConn) int {
	raw, err := nc.SyscallConn()
	if err != nil {
		t.Error(err)
		return -1
	}
	var n int
	var ierr error
	if err := raw.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
		ierr = err
	}
	if ierr != nil {
		t.Error(ierr)
		return -1
	}
	return n
}

// TestPingAndCloseBehindABacklog: with output held in the backlog for a
// client that paused reading, a ping waits behind it and is answered
// once the client reads again, and a close handshake started with a
// backlog delivers all the output before the close frame, even when the
// program writes more once the close frame is queued.
func TestPingAndCloseBehindABacklog(t *testing.T) {
	t.Parallel()
	const chunks, chunk = 16, 4 << 10 // per round: over the socket buffers, under the bound
	round, wrote := make(chan struct{}), make(chan struct{}, 3)
	l := &sessiontest.Launcher{}
	l.Script = func(p *sessiontest.Proc) sandbox.Exit {
		b := bytes.Repeat([]byte("z"), chunk)
		for range 3 {
			select {
			case <-round:
			case <-p.Stopped():
				return sandbox.Exit{Code: -1}
			}
			for range chunks {
				if _, err := p.Out().Stdout.Write(b); err != nil {
					break
				}
			}
			wrote <- struct{}{}
		}
		return sessiontest.UntilStopped(p)
	}
	e := newFakeEnv(t, l, nil)
	c := e.dialSmall(t, e.token(t, "acme", allScopes...))
	defer c.ws.CloseNow()
	c.expect(t, wire.MsgHello)
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "big", Command: "/bin/sh", Attach: true})
	c.expect(t, wire.MsgStarted)
	c.expect(t, wire.MsgAttached)
	c.expect(t, wire.MsgEvent) // started
	sc := serverConn(t, e)
	if sc.w.nb == nil {
		t.Fatal("a TCP connection has no non-blocking writer")
	}

	if err := sc.w.nb.Conn.(*net.TCPConn).SetWriteBuffer(4 << 10); err != nil {
		t.Fatal(err) // a round is then well over both socket buffers
	}

	round <- struct{}{}
	waitBacklog(t, sc.w.nb)
	pinged := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pinged <- sc.ws.Ping(ctx)
	}()
	c.readOutputBytes(t, chunks*chunk) // the ping frame follows
	<-wrote

	before := sc.w.bytesOut.Load()
	round <- struct{}{}
	<-wrote
	waitWritten(t, sc, before+chunks*chunk) // all of it in the backlog, then the close
	sc.close(websocket.StatusNormalClosure, "bye")
	round <- struct{}{} // output after the close frame: it waits in the ring
	<-wrote
	c.readOutputBytes(t, chunks*chunk) // the client's reads answer the ping on the way
	if err := <-pinged; err != nil {
		t.Fatalf("a ping behind the backlog: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 100 {
		f, err := c.read(ctx)
		if err != nil {
			if code := closeCode(err); code != websocket.StatusNormalClosure {
				t.Fatalf("the close behind the backlog: %v", err)
			}
			return
		}
		if f.out != nil {
			t.Fatalf("output after the close: %d bytes", len(f.out.Data))
		}
	}
	t.Fatal("no close in 100 messages")
}

// waitWritten waits, bounded, until c wrote at least n message bytes
// and nobody is writing.
func waitWritten(t *testing.T, c *conn, n uint64) {
	t.Helper()
	for range 3000 {
		if c.w.bytesOut.Load() >= n && !c.w.writing.Load() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("wrote %d message bytes, want %d", c.w.bytesOut.Load(), n)
}

// waitBacklog waits, bounded, until nb has a backlog (its goroutine
// writes it).
func waitBacklog(t *testing.T, nb *nbConn) {
	t.Helper()
	for range 3000 {
		nb.mu.Lock()
		flushing := nb.flushing
		nb.mu.Unlock()
		if flushing {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no backlog formed")
}

// readOutputBytes reads output messages until n bytes arrived, past
// control messages; a gap fails the test.
func (c *client) readOutputBytes(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := 0
	for range 10000 {
		if got >= n {
			break
		}
		f, err := c.read(ctx)
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v", got, n, err)
		}
		if f.out != nil {
			got += len(f.out.Data)
			continue
		}
		if f.msg.Type == wire.MsgGap {
			t.Fatalf("a gap after %d bytes: %+v", got, *f.msg)
		}
	}
	if got != n {
		t.Fatalf("read %d bytes of output, want %d", got, n)
	}
}

// TestNBConnUnderTheListener: a TCP connection that the Listener hands
// out (counted, in a limitedConn), as serve's are, gets the writer that
// never blocks; a TLS one does not.
func TestNBConnUnderTheListener(t *testing.T) {
	t.Parallel()
	nc, _ := tcpPair(t)
	if _, ok := newNBConn(&limitedConn{Conn: nc}, time.Second); !ok {
		t.Fatal("a counted TCP connection keeps blocking writes")
	}
	if _, ok := newNBConn(tls.Server(nc, &tls.Config{}), time.Second); ok {
		t.Fatal("a TLS connection got the raw writer")
	}
}

// tcpPair returns both ends of a TCP connection on 127.0.0.1, closed
// when the test ends.
func tcpPair(t *testing.T) (accepted, dialed net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err == nil {
			got <- nc
		}
		close(got)
	}()
	dc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	nc, ok := <-got
	if !ok {
		t.Fatal("nothing accepted")
	}
	t.Cleanup(func() { nc.Close() })
	return nc, dc
}

// nbPair is tcpPair with the accepted end wrapped as the server wraps it.
func nbPair(t *testing.T) (*nbConn, net.Conn) {
	t.Helper()
	nc, dc := tcpPair(t)
	nb, ok := newNBConn(nc, time.Second)
	if !ok {
		t.Fatal("no raw writer for TCP")
	}
	return nb, dc
}

// TestNBConnReadsAsTheSocketDoes: its raw reads keep net.Conn's
// meaning: the bytes in order, a deadline's timeout, end of file when
// the peer closes, and a Close that ends a waiting Read.
func TestNBConnReadsAsTheSocketDoes(t *testing.T) {
	t.Parallel()
	nb, dc := nbPair(t)
	if _, err := dc.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if n, err := io.ReadAtLeast(nb, buf, 5); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v; want hello", buf[:n], err)
	}
	if n, err := nb.Read(buf[:0]); n != 0 || err != nil {
		t.Fatalf("an empty read: %d, %v", n, err)
	}
	nb.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var ne net.Error
	if _, err := nb.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
	nb.SetReadDeadline(time.Time{})
	dc.Close()
	if _, err := nb.Read(buf); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want io.EOF", err)
	}

	nc2, _ := tcpPair(t)
	nb2, _ := newNBConn(nc2, time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := nb2.Read(buf)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond) // let it wait in the poller (it also passes if not yet)
	nb2.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read ended by Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a waiting Read")
	}
}

// TestNBConnWritesAfterABacklogOutlivedItsDeadline: the backlog's
// goroutine writes under a deadline; once the backlog is written that
// deadline must not stay on the socket, or the next write, a timeout
// later, would fail as past it and end a healthy connection. It also
// checks that a drained backlog leaves no buffer held for an idle
// connection.
func TestNBConnWritesAfterABacklogOutlivedItsDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	peer.(*net.TCPConn).SetReadBuffer(4 << 10)
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	nc.(*net.TCPConn).SetWriteBuffer(4 << 10)
	const timeout = time.Second
	nb, ok := newNBConn(nc, timeout)
	if !ok {
		t.Fatal("a TCP connection gets no non-blocking writer")
	}
	defer nb.Close()
	drained := make(chan struct{}, 1)
	nb.notify(func() { drained <- struct{}{} }, nil)
	chunk := bytes.Repeat([]byte("x"), 16<<10)
	sent := 0
	for i := 0; i < 64 && backlogHeld(nb) == 0; i++ { // until the socket is full
		if _, err := nb.Write(chunk); err != nil {
			t.Fatal(err)
		}
		sent += len(chunk)
	}
	if backlogHeld(nb) == 0 {
		t.Fatal("no backlog after 1 MiB to a client that does not read")
	}
	got := make(chan error, 1)
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	go func() {
		_, err := io.ReadFull(peer, make([]byte, sent))
		got <- err
	}()
	waitDrained(t, nb, drained)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	nb.mu.Lock()
	held := cap(nb.spare) + cap(nb.backlog)
	nb.mu.Unlock()
	if held != 0 {
		t.Errorf("a drained backlog leaves %d bytes held", held)
	}
	time.Sleep(timeout + 200*time.Millisecond) // the backlog's deadline passes
	if _, err := nb.Write([]byte("after")); err != nil {
		t.Fatalf("a write after the backlog's deadline passed: %v", err)
	}
	b := make([]byte, 5)
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(peer, b); err != nil || string(b) != "after" {
		t.Fatalf("read %q, %v; want after", b, err)
	}
}

// TestNBConnAwaitInputHandsOutWhatItRead: what awaitInput read, and the
// bytes sent with the upgrade before it, come out of Read first, in
// order and in reads of any size, before the socket is read again; its
// read's error comes from the next Read, once; and the lent buffer goes
// back once it is all taken.
func TestNBConnAwaitInputHandsOutWhatItRead(t *testing.T) {
	t.Parallel()
	nb, dc := nbPair(t)
	nb.unread([]byte("early-"))
	nb.awaitInput() // the early bytes are there: it must not wait
	if _, err := dc.Write([]byte("abcde")); err != nil {
		t.Fatal(err)
	}
	got := readAllOf(t, nb, len("early-abcde"), 4)
	if got != "early-abcde" {
		t.Fatalf("read %q, want early-abcde", got)
	}
	if nb.lent != nil || nb.pending != nil {
		t.Fatalf("still held: %q, lent %v", nb.pending, nb.lent != nil)
	}
	go func() {
		time.Sleep(20 * time.Millisecond) // awaitInput waits in the poller first (it also passes if not)
		dc.Write([]byte("fghij"))
	}()
	nb.awaitInput()
	if nb.lent == nil || string(nb.pending) != "fghij" {
		t.Fatalf("awaitInput holds %q (lent %v), want fghij", nb.pending, nb.lent != nil)
	}
	nb.awaitInput() // holds bytes: no second read
	if _, err := dc.Write([]byte("klm")); err != nil {
		t.Fatal(err)
	}
	if got := readAllOf(t, nb, len("fghijklm"), 3); got != "fghijklm" {
		t.Fatalf("read %q, want fghijklm", got)
	}
	dc.Close()
	nb.awaitInput()
	buf := make([]byte, 8)
	if n, err := nb.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read after the peer closed: %d, %v; want io.EOF", n, err)
	}
	if nb.readErr != nil {
		t.Fatalf("the error is kept after it was read: %v", nb.readErr)
	}
}

// readAllOf reads n bytes from r in reads of at most size bytes, bounded.
func readAllOf(t *testing.T, r io.Reader, n, size int) string {
	t.Helper()
	var out []byte
	buf := make([]byte, size)
	for i := 0; i < 100 && len(out) < n; i++ {
		k, err := r.Read(buf)
		if err != nil {
			t.Fatalf("after %q: %v", out, err)
		}
		out = append(out, buf[:k]...)
	}
	return string(out)
}

// TestReadLoopEndsWithItsConnection: the read loop waits for a message
// outside the WebSocket's Read (awaitMessage), so the end of the
// connection's context must still end it, as it ended the Read: the
// client sees the connection go, and the server lets go of it.
func TestReadLoopEndsWithItsConnection(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{}, nil)
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.ws.CloseNow()
	c.expect(t, wire.MsgHello)
	sc := serverConn(t, e)
	time.Sleep(20 * time.Millisecond) // the read loop waits for a message (it also passes if not yet)
	endByContext(t, e, c, sc)
}

// endByContext ends sc's context and checks that its client c sees the
// connection go and that the server lets go of it, each within 10 s.
func endByContext(t *testing.T, e *testEnv, c *client, sc *conn) {
	t.Helper()
	sc.cancel(errors.New("ended by the test"))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for range 100 {
		if _, err := c.read(ctx); err != nil {
			if ctx.Err() != nil {
				t.Fatal("the connection stayed open after its context ended")
			}
			break
		}
	}
	waitUnregistered(t, e)
}

// waitUnregistered waits at most 10 s until the server holds no
// connection.
func waitUnregistered(t *testing.T, e *testEnv) {
	t.Helper()
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool { return e.srv.connections() == 0 }) {
		t.Fatalf("%d connections still registered", e.srv.connections())
	}
}

// TestNBConnParksWhenIdle: awaitInput reports a socket that sent nothing
// for the idle period, without failing its next Read; a parked socket is
// resumed once by its client's next bytes, which the resumed reader then
// reads; and Close takes a parked socket back from the waiter before it
// closes it, and resumes it, so that its reader finds it closed.
func TestNBConnParksWhenIdle(t *testing.T) {
	t.Parallel()
	nb, dc := nbPair(t)
	nb.idle = 20 * time.Millisecond
	if !nb.awaitInput() {
		t.Fatal("awaitInput did not report 20ms without input idle")
	}
	if nb.readErr != nil {
		t.Fatalf("an idle wait left an error for the next Read: %v", nb.readErr)
	}
	resumed := make(chan struct{}, 2)
	if !nb.park(func() { resumed <- struct{}{} }) {
		t.Fatal("the waiter did not take the socket")
	}
	select {
	case <-resumed:
		t.Fatal("resumed before the client sent anything")
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := dc.Write([]byte("key")); err != nil {
		t.Fatal(err)
	}
	waitResumed(t, resumed)
	if nb.awaitInput() {
		t.Fatal("awaitInput reported idle with bytes waiting")
	}
	if got := readAllOf(t, nb, 3, 8); got != "key" {
		t.Fatalf("read %q after the resume, want key", got)
	}

	if !nb.awaitInput() || !nb.park(func() { resumed <- struct{}{} }) {
		t.Fatal("the socket did not park a second time")
	}
	nb.Close()
	waitResumed(t, resumed)
	if fdio.StopWaiting(nb.fd) {
		t.Fatal("the closed socket's descriptor is still in the waiter")
	}
	if nb.park(func() { resumed <- struct{}{} }) {
		t.Fatal("a closed socket parked")
	}
	if _, err := nb.Read(make([]byte, 8)); err == nil {
		t.Fatal("a read of the closed socket succeeded")
	}
}

// waitResumed waits at most 10 s for one resume.
func waitResumed(t *testing.T, resumed <-chan struct{}) {
	t.Helper()
	select {
	case <-resumed:
	case <-time.After(10 * time.Second):
		t.Fatal("the parked socket was not resumed")
	}
}

// TestNBConnReadsAMessageAcrossItsIdleDeadline: awaitInput's deadline
// is set once for an idle period, so it may pass in the middle of a
// message; the WebSocket's Read of the rest waits on without it, and a
// deadline set on the socket itself still applies.
func TestNBConnReadsAMessageAcrossItsIdleDeadline(t *testing.T) {
	t.Parallel()
	nb, dc := nbPair(t)
	nb.idle = 20 * time.Millisecond
	if _, err := dc.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if nb.awaitInput() {
		t.Fatal("awaitInput reported idle with a byte waiting")
	}
	go func() {
		time.Sleep(100 * time.Millisecond) // past the idle deadline
		dc.Write([]byte("bc"))
	}()
	if got := readAllOf(t, nb, 3, 8); got != "abc" {
		t.Fatalf("read %q, want abc", got)
	}
	if _, err := dc.Write([]byte("d")); err != nil {
		t.Fatal(err)
	}
	if nb.awaitInput() { // a new idle deadline, then the byte
		t.Fatal("awaitInput reported idle with a byte waiting")
	}
	nb.SetReadDeadline(time.Now().Add(20 * time.Millisecond)) // as linger does
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		time.Sleep(500 * time.Millisecond)
		dc.Write([]byte("e"))
	}()
	defer func() { <-wrote }()
	buf := make([]byte, 8)
	if n, err := nb.Read(buf); string(buf[:n]) != "d" || err != nil {
		t.Fatalf("read %q, %v; want d", buf[:n], err)
	}
	if n, err := nb.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read past the socket's own deadline: %q, %v; want a timeout", buf[:n], err)
	}
}

// TestNBConnReportsIdleOnlyToTheReadLoop: past the idle deadline, at the
// end of a frame, Read fails with errIdle only while the read loop reads
// (mayIdle) and no close handshake began (noIdle), whose read of the
// client's answer must wait for it; otherwise it reads on.
func TestNBConnReportsIdleOnlyToTheReadLoop(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		mayIdle, noIdle bool
		wantIdle        bool
	}{
		{"the read loop", true, false, true},
		{"a close handshake under way", true, true, false},
		{"another reader", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nb, dc := nbPair(t)
			nb.idle = 20 * time.Millisecond
			pong := []byte{0x80 | 10, 0x80, 1, 2, 3, 4} // a client's pong: fin, opcode 10, masked, empty
			if _, err := dc.Write(pong); err != nil {
				t.Fatal(err)
			}
			if nb.awaitInput() {
				t.Fatal("awaitInput reported idle with a frame waiting")
			}
			buf := make([]byte, 64)
			if n, err := nb.Read(buf); n != len(pong) || err != nil {
				t.Fatalf("read the pong: %d, %v", n, err)
			}
			nb.mayIdle.Store(tc.mayIdle)
			nb.noIdle.Store(tc.noIdle)
			wrote := make(chan struct{})
			go func() {
				defer close(wrote)
				time.Sleep(200 * time.Millisecond) // past the idle deadline
				dc.Write([]byte("x"))
			}()
			defer func() { <-wrote }()
			n, err := nb.Read(buf)
			if tc.wantIdle {
				if !errors.Is(err, errIdle) {
					t.Fatalf("read past the idle deadline at rest: %q, %v; want errIdle", buf[:n], err)
				}
				return
			}
			if err != nil || string(buf[:n]) != "x" {
				t.Fatalf("read past the idle deadline: %q, %v; want x", buf[:n], err)
			}
		})
	}
}

// TestCloseKeepsTheHandshakeFromIdling: the close handshake a server's
// close starts reads with no errIdle: conn.close says so before the
// handshake's goroutine runs.
func TestCloseKeepsTheHandshakeFromIdling(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{}, nil)
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.ws.CloseNow()
	c.expect(t, wire.MsgHello)
	sc := serverConn(t, e)
	sc.close(websocket.StatusPolicyViolation, "closed by the test")
	if !sc.w.nb.noIdle.Load() {
		t.Fatal("a close began and the handshake's reads may still report idle")
	}
}
