package gateway

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/wire"
)

// The cluster benchmarks compare three paths to an execution on node n1,
// over the real sandbox, both nodes in this process:
//   - direct: the client connects to n1;
//   - connproxy: the client connects through a reverse proxy that carries
//     the whole WebSocket to n1 (what a handshake naming its node gets);
//   - relay: the client connects to n0, which relays the channel over an
//     upstream to n1 (what a multiplexed connection gets).
//
// Only ratios from one run carry over; cpu-ms/MiB is this process's CPU
// (both nodes, the proxy and the client; not the sandboxed programs).

// benchRuns makes execution IDs unique across -count runs.
var benchRuns atomic.Int64

// clusterPaths starts a two-node cluster and returns the URL a client
// dials for each path.
func clusterPaths(b *testing.B) (n1 *relayNode, paths []struct{ name, url string }) {
	nodes := newRelayClusterWith(b, 2, nil, func(_ int, c *Config) {
		c.Sandbox.MaxTimeout = time.Hour
		c.InputPerSecond = 1 << 20
	})
	target, err := url.Parse(nodes[1].ts.URL)
	if err != nil {
		b.Fatal(err)
	}
	proxy := httptest.NewServer(httputil.NewSingleHostReverseProxy(target))
	b.Cleanup(proxy.Close)
	return nodes[1], []struct{ name, url string }{
		{"direct", nodes[1].wsURL()},
		{"connproxy", "ws" + strings.TrimPrefix(proxy.URL, "http") + "/v1/connect"},
		{"relay", nodes[0].wsURL()},
	}
}

// cpuTime is this process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkClusterAttach measures 64 MiB of terminal output delivered to
// an acknowledging client on each path: MiB/s and cpu-ms/MiB.
func BenchmarkClusterAttach(b *testing.B) {
	n1, paths := clusterPaths(b)
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			c := dialWS(b, p.url, n1.token(b, "bench", allScopes...))
			defer c.close()
			b.SetBytes(64 << 20)
			i := 0
			cpu, began := cpuTime(b), time.Now()
			for b.Loop() {
				i++
				c.send(b, wire.Request{Type: wire.TypeStart, ID: n1.id(fmt.Sprintf("tp-%s-%d", p.name, benchRuns.Add(1))), Command: "/bin/sh", Args: []string{"-c", benchOutput},
					PTY: &wire.Size{Rows: 24, Cols: 80}, Attach: true, Ack: true})
				if n := drain(b, c, drainOptions{ack: true}); n < 64<<20 {
					b.Fatalf("got %d bytes", n)
				}
			}
			b.ReportMetric(float64(64*i)/time.Since(began).Seconds(), "MiB/s")
			b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/1000/float64(64*i), "cpu-ms/MiB")
		})
	}
}

// clusterKeystrokes is how many keystrokes one iteration of
// BenchmarkClusterEcho times, so that -benchtime=1x gives percentiles.
const clusterKeystrokes = 500

// BenchmarkClusterEcho measures a keystroke's round trip (input frame
// in, the terminal's echo out) on each path: p50 and p99.
func BenchmarkClusterEcho(b *testing.B) {
	n1, paths := clusterPaths(b)
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			c := dialWS(b, p.url, n1.token(b, "bench", allScopes...))
			defer c.close()
			id := n1.id(fmt.Sprintf("echo-%s-%d", p.name, benchRuns.Add(1)))
			c.send(b, wire.Request{Type: wire.TypeStart, ID: id, Command: "/bin/sh", Args: []string{"-c", "stty raw -echo; cat"},
				PTY: &wire.Size{Rows: 24, Cols: 80}, Attach: true, Ack: true, TimeoutMS: 3600_000})
			att, _ := c.expect(b, wire.MsgAttached)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			var rtts []time.Duration
			var offset uint64
			key := func(k byte) {
				start := time.Now()
				c.sendInput(b, att.Channel, offset, string(k))
				offset++
				for {
					f, err := c.read(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if f.out != nil && len(f.out.Data) > 0 && f.out.Data[len(f.out.Data)-1] == k {
						rtts = append(rtts, time.Since(start))
						c.send(b, wire.Request{Type: wire.TypeAck, Channel: att.Channel, Seq: f.out.Seq})
						return
					}
				}
			}
			key('x') // waits for stty to have run
			rtts = rtts[:0]
			for b.Loop() {
				for range clusterKeystrokes {
					key(byte('a' + len(rtts)%26))
				}
			}
			slices.Sort(rtts)
			b.ReportMetric(float64(rtts[len(rtts)/2].Microseconds()), "µs-p50")
			b.ReportMetric(float64(rtts[len(rtts)*99/100].Microseconds()), "µs-p99")
			c.send(b, wire.Request{Type: wire.TypeCancel, ID: id})
		})
	}
}
