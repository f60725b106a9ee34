package sandboxtest

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// HelloServers serves "hello from IP" over HTTP on each of ips (of
// 127/8), all on one port, until the test ends, and returns the port:
// upstreams for tests of network policies.
func HelloServers(t testing.TB, ips ...string) int {
	t.Helper()
	for range 20 {
		var lns []net.Listener
		port := "0"
		for _, ip := range ips {
			ln, err := net.Listen("tcp4", net.JoinHostPort(ip, port))
			if err != nil {
				break
			}
			port = fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
			lns = append(lns, ln)
		}
		if len(lns) < len(ips) { // the port was taken on one address: try another
			for _, ln := range lns {
				ln.Close()
			}
			continue
		}
		for i, ln := range lns {
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "hello from %s", ips[i])
			}), ReadHeaderTimeout: 10 * time.Second}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })
		}
		return lns[0].Addr().(*net.TCPAddr).Port
	}
	t.Fatalf("no port free on all of %v", ips)
	return 0
}

// UDPEcho answers every datagram to ip (on a free port, which it
// returns) with "echo:" and the datagram, until the test ends.
func UDPEcho(t testing.TB, ip string) int {
	t.Helper()
	pc, err := net.ListenPacket("udp4", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("a UDP echo server on %s: %v", ip, err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		b := make([]byte, 64<<10)
		for {
			n, from, err := pc.ReadFrom(b)
			if err != nil {
				return
			}
			pc.WriteTo(append([]byte("echo:"), b[:n]...), from)
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr).Port
}
