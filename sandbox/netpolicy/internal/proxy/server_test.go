package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestConnectHalfClose: a CONNECT tunnel carries each way's end of
// stream on its own, and counts the bytes each way.
func TestConnectHalfClose(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	c, resp := f.connect(t, f.echo)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	halfClose(t, c)
	r := f.waitRecords(t, 1)[0]
	if r.Protocol != HTTPConnect || r.Up != 5 || r.Down != 8 || r.Err != nil || r.Refused != "" {
		t.Errorf("record %+v, want 5 bytes up and 8 down", r)
	}
}

// TestConnectEarlyData: bytes the client sends right behind its
// CONNECT, before the 200, reach the target first.
func TestConnectEarlyData(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	c := f.dial(t)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\nhello", f.echo)
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	if want := "HTTP/1.1 200 Connection established\r\n\r\nhellobye"; string(got) != want || err != nil {
		t.Errorf("%q %v, want %q", got, err, want)
	}
}

// TestHandshakeTimeout: a client that sends nothing, or its request
// too slowly, is dropped once HandshakeTimeout passed.
func TestHandshakeTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	f := newFixture(t, func(s *Server) { s.HandshakeTimeout = timeout })
	for _, tc := range []struct {
		name  string
		first string
		drip  string
	}{
		{"silent", "", ""},
		{"slow http", "GET http://127.0.0.2/ HTTP/1.1\r\n", "X-Slow: 1\r\n"},
		{"slow connect", "CONNECT 127.0.0.2:80 HTTP/1.1\r\n", "X-Slow: 1\r\n"},
		{"slow socks", "\x05\x01\x00", "\x05\x01\x00\x03\xff"}, // a 255-byte name, byte by byte
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The clock starts before the dial: the proxy's starts at its
			// accept, which may come before the dial returns here.
			start := time.Now()
			c := f.dial(t)
			io.WriteString(c, tc.first)
			dropped := make(chan error, 1)
			go func() { _, err := io.Copy(io.Discard, c); dropped <- err }()
			drip := time.NewTicker(50 * time.Millisecond)
			defer drip.Stop()
			for i := 0; ; i++ {
				select {
				case <-dropped:
					if d := time.Since(start); d < timeout {
						t.Errorf("dropped after %v, before the timeout %v", d, timeout)
					}
					return
				case <-drip.C:
					if i > int(safety/(50*time.Millisecond)) {
						t.Fatal("never dropped")
					}
					if tc.drip != "" {
						io.WriteString(c, tc.drip[:1]) // one byte at a time
						tc.drip = tc.drip[1:] + tc.drip[:1]
					}
				}
			}
		})
	}
}

// TestKeepAliveTimeout: a plain HTTP connection idle between requests
// is closed once KeepAliveTimeout passed.
func TestKeepAliveTimeout(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(s *Server) { s.KeepAliveTimeout = 300 * time.Millisecond })
	c := f.dial(t)
	fmt.Fprintf(c, "GET %s/hello HTTP/1.1\r\nHost: x\r\n\r\n", f.httpURL)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp.Close {
		t.Fatal("the proxy closes after one request")
	}
	if n, err := br.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Errorf("idle connection: %d bytes, %v; want its end", n, err)
	}
	if r := f.waitRecords(t, 1)[0]; r.Protocol != HTTPForward || r.Up == 0 || r.Down == 0 {
		t.Errorf("record %+v", r)
	}
}

// TestMaxConns: beyond MaxConns a client is told 503, or SOCKS5's
// general failure, and closed; once a connection ends there is room
// again.
func TestMaxConns(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(s *Server) { s.MaxConns = 2 })
	var tunnels []net.Conn
	for range 2 {
		c, resp := f.connect(t, f.echo)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT within the limit: %d", resp.StatusCode)
		}
		tunnels = append(tunnels, c)
	}
	_, resp := f.connect(t, f.echo)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || string(body) != "too many connections\n" {
		t.Errorf("CONNECT beyond the limit: %d %q, want 503", resp.StatusCode, body)
	}
	if got := socksAsk(t, f.dial(t), socksRequestBytes(socksConnect, "127.0.0.4", 1)); got != socksGeneralFailure {
		t.Errorf("SOCKS5 beyond the limit: %#x, want general failure", got)
	}
	for _, r := range f.waitRecords(t, 2) {
		if !errors.Is(r.Err, ErrBusy) {
			t.Errorf("record %+v, want ErrBusy", r)
		}
	}
	halfClose(t, tunnels[0])
	ok := sandboxtest.Eventually(t, safety, func() bool {
		c, resp := f.connect(t, f.echo)
		c.Close()
		return resp.StatusCode == http.StatusOK
	})
	if !ok {
		t.Error("no room after a tunnel ended")
	}
}

// TestClose: Close ends tunnels, Dials, handshakes and idle plain
// connections, and returns once their goroutines ended; Serve returns
// ErrClosed, also when called after Close.
func TestClose(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	tunnel, resp := f.connect(t, f.echo)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	dialing := f.dial(t)
	fmt.Fprintf(dialing, "CONNECT %s:443 HTTP/1.1\r\n\r\n", slowHost)
	silent := f.dial(t)
	idle := f.dial(t)
	fmt.Fprintf(idle, "GET %s/hello HTTP/1.1\r\nHost: x\r\n\r\n", f.httpURL)
	if resp, err := http.ReadResponse(bufio.NewReader(idle), nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("plain request: %v", err)
	}
	if !sandboxtest.Eventually(t, safety, func() bool { return len(f.dialer.askedFor()) == 3 }) {
		t.Fatalf("dials %v, want 3", f.dialer.askedFor())
	}

	f.srv.Close()
	for name, c := range map[string]net.Conn{"tunnel": tunnel, "dialing": dialing, "silent": silent, "idle": idle} {
		c.SetReadDeadline(time.Now().Add(safety))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Errorf("%s: %v, want its end", name, err)
		}
	}
	if err := <-f.serveErr; !errors.Is(err, ErrClosed) {
		t.Errorf("Serve: %v, want ErrClosed", err)
	}
	f.serveErr <- ErrClosed // for the cleanup
	var closedDial bool
	for _, r := range f.recorded() {
		closedDial = closedDial || r.Host == slowHost && errors.Is(r.Err, ErrClosed)
	}
	if !closedDial {
		t.Errorf("records %+v: want the interrupted Dial's with ErrClosed", f.recorded())
	}
	if err := f.srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Serve(l); !errors.Is(err, ErrClosed) {
		t.Errorf("Serve after Close: %v", err)
	}
	if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
		t.Error("Serve after Close left its listener open")
	}
}

// TestClassify: the answers to Dial errors not met elsewhere.
func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want failure
	}{
		{&net.DNSError{Err: "no such host", Name: "x.test", IsNotFound: true}, failure{socksHostUnreachable, 502, "no such host"}},
		{&net.DNSError{Err: "timeout", Name: "x.test", IsTimeout: true}, failure{socksTTLExpired, 504, "connect timed out"}},
		{fmt.Errorf("dial: %w", &Refused{Reason: "no"}), failure{socksNotAllowed, 403, "no"}},
		{errors.New("10.0.0.1: something odd"), failure{socksGeneralFailure, 502, "connect failed"}},
		{ErrClosed, failure{socksGeneralFailure, 503, "proxy closing"}},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) = %+v, want %+v", tc.err, got, tc.want)
		}
	}
	if strings.Contains(classify(errors.New("10.0.0.1")).text, "10.0.0.1") {
		t.Error("an address leaked into the text")
	}
}
