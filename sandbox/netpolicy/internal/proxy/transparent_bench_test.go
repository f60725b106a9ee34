//go:build linux

package proxy

import (
	"context"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// fixedDialer connects every target to one address: the benchmarks'
// policy and resolver.
type fixedDialer struct{ to string }

func (d fixedDialer) Dial(ctx context.Context, _ string, _ uint16) (net.Conn, error) {
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", d.to)
}

// startTransparent serves a Server with d on a redirected namespace's
// transparent listener until the benchmark ends.
func startTransparent(b *testing.B, d Dialer) *redirectedNS {
	b.Helper()
	ns := newRedirectedNS(b)
	l := ns.listen(b, "127.0.0.1:3129")
	s := &Server{Dialer: d, MaxConns: 2048}
	done := make(chan error, 1)
	go func() { done <- s.ServeTransparent(l) }()
	b.Cleanup(func() {
		s.Close()
		<-done
	})
	return ns
}

// outside is the address the namespace's program connects to; the
// redirect sends it to the transparent listener.
const outside = "192.0.2.1:443"

func dialHost(b *testing.B, addr string) func() net.Conn {
	return func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
}

func dialFrom(b *testing.B, ns *redirectedNS) func() net.Conn {
	return func() net.Conn {
		c, err := ns.dial(outside)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
}

// BenchmarkTransparentThroughput downloads 1 GiB from a TCP server on
// 127.0.0.2, from the host directly and from a redirected namespace
// through the transparent listener, side by side. (The namespace's
// connect runs on its thread; the copy does not.)
func BenchmarkTransparentThroughput(b *testing.B) {
	const size = 1 << 30
	source := startSource(b, size)
	ns := startTransparent(b, fixedDialer{source})
	for _, bc := range []struct {
		name string
		dial func() net.Conn
	}{{"direct", dialHost(b, source)}, {"transparent", dialFrom(b, ns)}} {
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

// BenchmarkTransparentConnect measures a connection's setup and first
// round trip to an echo server on 127.0.0.4, from the host directly and
// through the transparent listener, and reports the median.
func BenchmarkTransparentConnect(b *testing.B) {
	echo := startEcho(b, "127.0.0.4")
	ns := startTransparent(b, fixedDialer{echo})
	for _, bc := range []struct {
		name string
		dial func() net.Conn
	}{{"direct", dialHost(b, echo)}, {"transparent", dialFrom(b, ns)}} {
		b.Run(bc.name, func(b *testing.B) {
			var one [1]byte
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				c := bc.dial()
				if _, err := c.Write(one[:]); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, one[:]); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
				c.Close()
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
		})
	}
}

// BenchmarkTransparentIdleConn reports the memory (heap and stacks) the
// Server holds per idle transparent connection: 256 to an echo server,
// against as many direct connections to it.
func BenchmarkTransparentIdleConn(b *testing.B) {
	const n = 256
	echo := startEcho(b, "127.0.0.4")
	ns := startTransparent(b, fixedDialer{echo})
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
		direct := open(dialHost(b, echo))
		transparent := open(dialFrom(b, ns))
		b.ReportMetric(float64(int64(transparent)-int64(direct))/n, "transparent-B/conn")
	}
}

// BenchmarkTransparent1000Conns opens 1,000 connections at once from
// one namespace through the transparent listener, each with a round
// trip to an echo server while all are open, then closes them.
func BenchmarkTransparent1000Conns(b *testing.B) {
	const n = 1000
	echo := startEcho(b, "127.0.0.4")
	ns := startTransparent(b, fixedDialer{echo})
	dial := dialFrom(b, ns)
	for b.Loop() {
		conns := make([]net.Conn, n)
		for i := range conns {
			conns[i] = dial()
		}
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for _, c := range conns {
			wg.Go(func() {
				var one [1]byte
				c.SetDeadline(time.Now().Add(safety))
				if _, err := c.Write(one[:]); err != nil {
					errs <- err
					return
				}
				if _, err := io.ReadFull(c, one[:]); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for _, c := range conns {
			c.Close()
		}
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}
