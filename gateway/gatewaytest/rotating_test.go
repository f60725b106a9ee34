package gatewaytest_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/gatewaytest"
)

// byteServer accepts on 127.0.0.1 and writes n bytes of b to each
// connection, then keeps it open until the client leaves.
func byteServer(t *testing.T, b byte, n int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, n)
				for i := range buf {
					buf[i] = b
				}
				c.Write(buf)
				io.Copy(io.Discard, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// TestRotatingProxySpreadsAndCuts: connections land on every target, and
// each is cut after its budget of server bytes.
func TestRotatingProxySpreadsAndCuts(t *testing.T) {
	t.Parallel()
	a, b := byteServer(t, 'a', 1000), byteServer(t, 'b', 1000)
	p := gatewaytest.NewRotatingProxy(t, []string{a, b}, gatewaytest.ProxyConfig{MinBudget: 100, Spread: 50, Seed: 7})
	got := map[byte]int{}
	for range 40 {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		data, err := io.ReadAll(c)
		c.Close()
		if err != nil || len(data) < 100 || len(data) >= 150 {
			t.Fatalf("read %d bytes (%v), want a cut between 100 and 150", len(data), err)
		}
		got[data[0]]++
	}
	served := p.Served()
	if got['a'] == 0 || got['b'] == 0 || served[a] != got['a'] || served[b] != got['b'] || p.Cuts() != 40 {
		t.Fatalf("connections by target %v, served %v, cuts %d; want both, 40 cuts", got, served, p.Cuts())
	}
}
