package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/wire"
)

// BenchmarkResizeFlood measures the CPU the gateway process spends per
// resize request when a client floods its own 1000x1000 PTY execution
// with resizes to 1000x1000 and 2x2 in turn, without req: the reading,
// the rate limit, the terminal, the ring and the emulator (which is fed
// the resizes the ring evicts when output follows). The client's side
// runs in the same process, so the figure is an upper bound. At the
// default limits most requests are refused; with the limit lifted every
// one is taken and coalesced.
func BenchmarkResizeFlood(b *testing.B) {
	b.Run("defaults", func(b *testing.B) { benchResizeFlood(b, nil) })
	b.Run("unlimited", func(b *testing.B) {
		benchResizeFlood(b, func(c *Config) { c.ResizesPerSecond = 1 << 30 })
	})
}

func benchResizeFlood(b *testing.B, tweak func(*Config)) {
	e := newEnv(b, func(c *Config) {
		c.Sandbox.MaxTimeout = time.Hour
		if tweak != nil {
			tweak(c)
		}
	})
	c := e.dial(b, e.token(b, "bench", allScopes...))
	defer c.close()
	c.send(b, wire.Request{Type: wire.TypeStart, ID: "flood", Command: "/bin/sh", Args: []string{"-c", "stty raw -echo; echo ready; exec cat"}, PTY: &wire.Size{Rows: 1000, Cols: 1000}, Attach: true, TimeoutMS: 3600_000})
	c.expect(b, wire.MsgStarted)
	att, _ := c.expect(b, wire.MsgAttached)
	readOutput(b, c, "ready")
	var offset uint64
	echo := func(k string) { // output after the resizes feeds the emulator what the ring evicted
		c.sendInput(b, att.Channel, offset, k)
		offset += uint64(len(k))
		readOutput(b, c, k)
	}
	cpu0 := cpuTime(b)
	n := 0
	for b.Loop() {
		side := 1000
		if n%2 == 1 {
			side = 2
		}
		c.send(b, wire.Request{Type: wire.TypeResize, Channel: att.Channel, Rows: side, Cols: side})
		n++
		if n%512 == 0 {
			echo("x")
		}
	}
	c.send(b, wire.Request{Type: wire.TypePing, Req: "p"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for {
		f, err := c.read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if f.msg != nil && f.msg.Type == wire.MsgPong {
			break
		}
	}
	echo("y")
	echo("z") // the output writer fed the emulator after "y" before it appended "z"
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(n), "cpu-µs/resize")
	c.send(b, wire.Request{Type: wire.TypeCancel, ID: "flood"})
}
