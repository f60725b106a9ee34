package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"testing"
)

// loopbackDialer connects wherever it is asked: the benchmarks' policy.
type loopbackDialer struct{}

func (loopbackDialer) Dial(ctx context.Context, host string, port uint16) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(int(port))))
}

// startProxy serves a Server with d on 127.0.0.1 until the test ends.
func startProxy(tb testing.TB, d Dialer) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{Dialer: d}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	tb.Cleanup(func() {
		s.Close()
		<-done
	})
	return l.Addr().String()
}

// startSource serves size zero bytes to each connection on 127.0.0.2,
// then closes it.
func startSource(tb testing.TB, size int64) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		zeros := make([]byte, 1<<20)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				for left := size; left > 0; left -= int64(len(zeros)) {
					if _, err := c.Write(zeros[:min(left, int64(len(zeros)))]); err != nil {
						return
					}
				}
			})
		}
	})
	tb.Cleanup(func() { l.Close(); wg.Wait() })
	return l.Addr().String()
}

// tunnel opens a CONNECT tunnel through proxy to target. What the
// target sent right behind the 200 is read from the tunnel first.
func tunnel(tb testing.TB, proxy, target string) net.Conn {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		tb.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	return bufferedConn{c, br}
}

// bufferedConn reads through the reader that read the CONNECT's
// response; a read larger than its buffer goes to the connection
// directly once the buffer is empty.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// BenchmarkProxyThroughput downloads 64 MiB from a TCP server on
// 127.0.0.2, directly and through a CONNECT tunnel, side by side.
func BenchmarkProxyThroughput(b *testing.B) {
	const size = 64 << 20
	source := startSource(b, size)
	proxy := startProxy(b, loopbackDialer{})
	for _, bc := range []struct {
		name string
		dial func() net.Conn
	}{
		{"direct", func() net.Conn {
			c, err := net.Dial("tcp", source)
			if err != nil {
				b.Fatal(err)
			}
			return c
		}},
		{"connect", func() net.Conn { return tunnel(b, proxy, source) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				c := bc.dial()
				n, err := io.Copy(io.Discard, c)
				c.Close()
				if n != size || err != nil {
					b.Fatalf("read %d bytes, %v", n, err)
				}
			}
		})
	}
}

// BenchmarkProxyConnect measures a connection's setup and first round
// trip to an echo server on 127.0.0.4, directly, through CONNECT and
// through SOCKS5.
func BenchmarkProxyConnect(b *testing.B) {
	echo := startEcho(b, "127.0.0.4")
	proxy := startProxy(b, loopbackDialer{})
	host, portText, _ := net.SplitHostPort(echo)
	port, _ := strconv.ParseUint(portText, 10, 16)
	socksReq := socksRequestBytes(socksConnect, host, uint16(port))
	for _, bc := range []struct {
		name string
		dial func() net.Conn
	}{
		{"direct", func() net.Conn {
			c, err := net.Dial("tcp", echo)
			if err != nil {
				b.Fatal(err)
			}
			return c
		}},
		{"connect", func() net.Conn { return tunnel(b, proxy, echo) }},
		{"socks5", func() net.Conn {
			c, err := net.Dial("tcp", proxy)
			if err != nil {
				b.Fatal(err)
			}
			c.Write(append([]byte{socksVersion, 1, socksNoAuth}, socksReq...))
			var reply [12]byte
			if _, err := io.ReadFull(c, reply[:]); err != nil || reply[3] != socksSucceeded {
				b.Fatalf("SOCKS5: %x %v", reply, err)
			}
			return c
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var one [1]byte
			for b.Loop() {
				c := bc.dial()
				if _, err := c.Write(one[:]); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, one[:]); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}

// BenchmarkProxyIdleConn reports the memory (heap and stacks) the
// proxy holds per idle CONNECT tunnel: 256 tunnels to an echo server,
// against as many direct connections to it.
func BenchmarkProxyIdleConn(b *testing.B) {
	const n = 256
	echo := startEcho(b, "127.0.0.4")
	proxy := startProxy(b, loopbackDialer{})
	open := func(dial func() net.Conn) uint64 {
		before := inUse()
		conns := make([]net.Conn, n)
		var one [1]byte
		for i := range conns {
			conns[i] = dial()
			conns[i].Write(one[:])
			if _, err := io.ReadFull(conns[i], one[:]); err != nil {
				b.Fatal(err)
			}
		}
		after := inUse()
		for _, c := range conns {
			c.Close()
		}
		return max(after, before) - before
	}
	for b.Loop() {
		direct := open(func() net.Conn {
			c, err := net.Dial("tcp", echo)
			if err != nil {
				b.Fatal(err)
			}
			return c
		})
		proxied := open(func() net.Conn { return tunnel(b, proxy, echo) })
		b.ReportMetric(float64(int64(proxied)-int64(direct))/n, "proxy-B/conn")
	}
}

// inUse is the heap and stack memory in use after a collection.
func inUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}
