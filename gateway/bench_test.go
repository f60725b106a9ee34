package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"github.com/coder/websocket"
	"hash"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/session"
)

// benchOutput is what the throughput benchmarks print: 64 MiB of text.
const benchOutput = `yes 0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz | head -c 64M`

// BenchmarkPTYThroughput measures PTY output delivered to one WebSocket
// client, beside the same command read from a PTY directly in one
// process: a client that acknowledges (termgate's own clients; the
// program waits for it) and one that does not (served free running).
// gateway-acked-recorded also records every execution to a file.
func BenchmarkPTYThroughput(b *testing.B) {
	for _, v := range []struct {
		name                  string
		ack, noScreen, record bool
	}{
		{"gateway-acked", true, false, false}, {"gateway-acked-no-screen-state", true, true, false},
		{"gateway-acked-recorded", true, false, true}, {"gateway", false, false, false},
	} {
		ack := v.ack
		b.Run(v.name, func(b *testing.B) {
			sc := session.Config{Launcher: session.SandboxLauncher(needLauncher(b)), NoScreenState: v.noScreen}
			if v.record {
				sc.RecordingsDir, sc.RecordingMaxSize = b.TempDir(), 256<<20
			}
			e := newEnvSession(b, sc, func(c *Config) {
				c.Record.All = v.record
				c.Sandbox.MaxTimeout = time.Hour
				if !ack { // served free running: a ring that holds it all, so no gap
					c.Ring = replay.Config{MaxBytes: 16 << 20}
				}
			})
			benchPTYOn(b, e, ack)
		})
	}
	b.Run("direct", func(b *testing.B) {
		b.SetBytes(64 << 20)
		for b.Loop() {
			cmd := exec.Command("/bin/sh", "-c", benchOutput)
			f, err := pty.Start(cmd)
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 32<<10)
			n := 0
			for {
				m, err := f.Read(buf)
				n += m
				if err != nil {
					break
				}
			}
			f.Close()
			cmd.Wait()
			if n < 64<<20 {
				b.Fatalf("got %d bytes", n)
			}
		}
	})
}

// benchPTYOn runs benchOutput on a terminal of e's gateway once per
// iteration, delivered to one client (acknowledging with ack).
func benchPTYOn(b *testing.B, e *testEnv, ack bool) {
	c := e.dial(b, e.token(b, "bench", allScopes...))
	defer c.close()
	b.SetBytes(64 << 20)
	i := 0
	for b.Loop() {
		i++
		c.send(b, wire.Request{Type: wire.TypeStart, ID: fmt.Sprint("tp-", i), Command: "/bin/sh", Args: []string{"-c", benchOutput},
			PTY: &wire.Size{Rows: 24, Cols: 80}, Attach: true, Ack: ack})
		if n := drain(b, c, drainOptions{ack: ack}); n < 64<<20 {
			b.Fatalf("got %d bytes", n)
		}
	}
}

// pipeOutput is what the pipe benchmark prints: 256 MiB.
const pipeOutput = `head -c 256M /dev/zero`

// BenchmarkPipeThroughput measures pipe output delivered to an
// acknowledging client that hashes what it receives (every byte
// delivered: the program waits for the client), beside the same command's
// pipe read and hashed directly in one process.
func BenchmarkPipeThroughput(b *testing.B) {
	b.Run("gateway-live", func(b *testing.B) {
		e := newEnv(b, func(c *Config) {
			c.Sandbox.MaxTimeout = time.Hour
			c.Ring = replay.Config{MaxBytes: 512 << 20, MaxEvents: 1 << 16}
		})
		c := e.dial(b, e.token(b, "bench", allScopes...))
		defer c.close()
		b.SetBytes(256 << 20)
		i := 0
		for b.Loop() {
			i++
			c.send(b, wire.Request{Type: wire.TypeStart, ID: fmt.Sprint("pipe-", i), Command: "/bin/sh", Args: []string{"-c", pipeOutput}, Attach: true, Flow: wire.FlowLive})
			if n := drain(b, c, drainOptions{hash: sha256.New()}); n != 256<<20 {
				b.Fatalf("got %d bytes", n)
			}
		}
	})
	b.Run("gateway-acked", func(b *testing.B) {
		e := newEnv(b, func(c *Config) { c.Sandbox.MaxTimeout = time.Hour })
		c := e.dial(b, e.token(b, "bench", allScopes...))
		defer c.close()
		b.SetBytes(256 << 20)
		i := 0
		for b.Loop() {
			i++
			c.send(b, wire.Request{Type: wire.TypeStart, ID: fmt.Sprint("pipe-", i), Command: "/bin/sh", Args: []string{"-c", pipeOutput}, Attach: true, Ack: true})
			if n := drain(b, c, drainOptions{ack: true, hash: sha256.New()}); n != 256<<20 {
				b.Fatalf("got %d bytes", n)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		b.SetBytes(256 << 20)
		for b.Loop() {
			cmd := exec.Command("/bin/sh", "-c", pipeOutput)
			out, err := cmd.StdoutPipe()
			if err != nil {
				b.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			h := sha256.New()
			n, _ := io.CopyBuffer(h, out, make([]byte, 32<<10))
			cmd.Wait()
			if n != 256<<20 {
				b.Fatalf("got %d bytes", n)
			}
		}
	})
}

// BenchmarkSlowReader measures a client that reads a terminal at 10
// MiB/s while the program could print far faster: acknowledging, it must
// receive every byte at about its own rate (delivered-% and MB/s); one
// that does not is served free running and loses what the ring evicts.
func BenchmarkSlowReader(b *testing.B) {
	b.Run("acked", func(b *testing.B) { benchSlowReader(b, true) })
	b.Run("unacked", func(b *testing.B) { benchSlowReader(b, false) })
}

func benchSlowReader(b *testing.B, ack bool) {
	const size, rate = 32 << 20, 10 << 20
	e := newEnv(b, func(c *Config) { c.Sandbox.MaxTimeout = time.Hour })
	c := e.dial(b, e.token(b, "bench", allScopes...))
	defer c.close()
	b.SetBytes(size)
	i, total := 0, 0
	for b.Loop() {
		i++
		c.send(b, wire.Request{Type: wire.TypeStart, ID: fmt.Sprint("slow-", i), Command: "/bin/sh",
			Args: []string{"-c", `head -c 32M /dev/zero | tr '\0' x`}, PTY: &wire.Size{Rows: 24, Cols: 80}, Attach: true, Ack: ack})
		total += drain(b, c, drainOptions{ack: ack, rate: rate, gapsOK: true})
	}
	b.ReportMetric(100*float64(total)/float64(i*size), "delivered-%")
}

// drainOptions say how drain reads.
type drainOptions struct {
	ack    bool      // acknowledge every frame, as termgate's clients do
	hash   hash.Hash // hash the output
	rate   float64   // read at most this many bytes per second
	gapsOK bool      // count gaps instead of failing
}

// drain reads one channel to its exit and counts output bytes. It reads
// into one reused buffer, so the client costs the shared CPUs as little
// as a real client in another process would.
func drain(b *testing.B, c *client, o drainOptions) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	buf := make([]byte, 1<<20)
	var ack []byte
	n, start := 0, time.Now()
	var channel uint32
	for {
		typ, r, err := c.ws.Reader(ctx)
		if err != nil {
			b.Fatal(err)
		}
		m, err := io.ReadFull(r, buf)
		if err != io.ErrUnexpectedEOF && err != io.EOF {
			b.Fatalf("read frame: %v", err)
		}
		if typ == websocket.MessageBinary {
			out, err := wire.DecodeOutput(buf[:m])
			if err != nil {
				b.Fatal(err)
			}
			n += len(out.Data)
			if o.hash != nil {
				o.hash.Write(out.Data)
			}
			if o.rate > 0 {
				if ahead := time.Duration(float64(n)/o.rate*float64(time.Second)) - time.Since(start); ahead > 0 {
					time.Sleep(ahead)
				}
			}
			if o.ack {
				ack = fmt.Appendf(ack[:0], `{"type":"ack","channel":%d,"seq":%d}`, channel, out.Seq)
				if err := c.ws.Write(ctx, websocket.MessageText, ack); err != nil {
					b.Fatal(err)
				}
			}
			continue
		}
		var msg wire.Message
		json.Unmarshal(buf[:m], &msg)
		switch {
		case msg.Type == wire.MsgAttached:
			channel = msg.Channel
		case msg.Type == wire.MsgExit:
			return n
		case msg.Type == wire.MsgGap && o.gapsOK:
		case msg.Type == wire.MsgGap, msg.Type == wire.MsgError:
			b.Fatalf("%+v", msg)
		}
	}
}

// echoKeystrokes is how many keystrokes one iteration of BenchmarkEcho
// (and BenchmarkDurable's echo) times, so that -benchtime=1x gives
// percentiles of samples enough.
const echoKeystrokes = 500

// BenchmarkEcho measures a keystroke's round trip: input frame in, the
// PTY's echo out, through the sandbox. Reports p50 and p99 over
// echoKeystrokes keystrokes per iteration.
func BenchmarkEcho(b *testing.B) {
	b.Run("acked", func(b *testing.B) { benchEcho(b, true) })
	b.Run("unacked", func(b *testing.B) { benchEcho(b, false) })
}

// benchEcho measures keystrokes; with ack, the client acknowledges each
// echo as soon as it arrived, outside the measured round trip
// (termgate's clients ack less often: this is the worst case).
func benchEcho(b *testing.B, ack bool) {
	benchEchoOn(b, newEnv(b, func(c *Config) { c.Sandbox.MaxTimeout = time.Hour; c.InputPerSecond = 1 << 20 }), ack)
}

// benchEchoOn is benchEcho on the gateway of e.
func benchEchoOn(b *testing.B, e *testEnv, ack bool) {
	c := e.dial(b, e.token(b, "bench", allScopes...))
	defer c.close()
	c.send(b, wire.Request{Type: wire.TypeStart, ID: "echo", Command: "/bin/sh", Args: []string{"-c", "stty raw -echo; cat"}, PTY: &wire.Size{Rows: 24, Cols: 80}, Attach: true, Ack: ack, TimeoutMS: 3600_000})
	att, _ := c.expect(b, wire.MsgAttached)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var rtts []time.Duration
	waitEcho := func(want byte, start time.Time) {
		for {
			f, err := c.read(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if f.out != nil && len(f.out.Data) > 0 && f.out.Data[len(f.out.Data)-1] == want {
				rtts = append(rtts, time.Since(start))
				if ack {
					c.send(b, wire.Request{Type: wire.TypeAck, Channel: att.Channel, Seq: f.out.Seq})
				}
				return
			}
		}
	}
	// The first keystroke waits for stty to have run.
	var offset uint64
	c.sendInput(b, att.Channel, offset, "x")
	offset++
	waitEcho('x', time.Now())
	rtts = rtts[:0]
	for b.Loop() {
		for range echoKeystrokes {
			k := byte('a' + len(rtts)%26)
			start := time.Now()
			c.sendInput(b, att.Channel, offset, string(k))
			offset++
			waitEcho(k, start)
		}
	}
	slices.Sort(rtts)
	b.ReportMetric(float64(rtts[len(rtts)/2].Microseconds()), "µs-p50")
	b.ReportMetric(float64(rtts[len(rtts)*99/100].Microseconds()), "µs-p99")
	c.send(b, wire.Request{Type: wire.TypeCancel, ID: "echo"})
}

// BenchmarkResume1MiB measures a reconnecting client catching up on 1 MiB
// of output it missed: from attach to the exit message.
func BenchmarkResume1MiB(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.Ring = replay.Config{MaxBytes: 4 << 20} })
	c := e.dial(b, e.token(b, "bench", allScopes...))
	defer c.close()
	c.send(b, wire.Request{Type: wire.TypeStart, ID: "mib", Command: "/bin/sh", Args: []string{"-c", "head -c 1M /dev/zero | tr '\\0' x"}})
	c.expect(b, wire.MsgStarted)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if info, err := e.sup.Wait(ctx, "bench", "mib", 1<<40, time.Minute); err != nil || info.Result == nil {
		b.Fatalf("%+v %v", info, err)
	}
	b.SetBytes(1 << 20)
	for b.Loop() {
		c.send(b, wire.Request{Type: wire.TypeAttach, ID: "mib"})
		if n := drain(b, c, drainOptions{}); n != 1<<20 {
			b.Fatalf("resumed %d bytes", n)
		}
	}
}

// BenchmarkIdlePTYExecutions starts 1,000 idle PTY shells and reports
// termgate's memory per execution (heap and goroutine stacks) and the
// threads it holds. Each iteration ends its shells (and waits for them)
// so that the next starts from the same state.
func BenchmarkIdlePTYExecutions(b *testing.B) {
	const n = 1000
	e := newRoomyEnv(b, n, 64)
	round := 0
	for b.Loop() {
		round++
		prefix := fmt.Sprintf("idle-%d-", round)
		heap0, stacks0 := memSplit()
		threadsBefore := threads()
		start := time.Now()
		startIdleShells(b, e, prefix, n, 8)
		elapsed := time.Since(start)
		time.Sleep(idleSettle) // every shell reached its prompt and went idle
		heap1, stacks1 := memSplit()
		b.ReportMetric(float64(heap1+stacks1-heap0-stacks0)/n/1024, "KiB/execution")
		b.ReportMetric(float64(stacks1-stacks0)/n/1024, "KiB-stacks/execution")
		b.ReportMetric(float64(threads()-threadsBefore)/n, "threads/execution")
		b.ReportMetric(elapsed.Seconds(), "s-to-start-1000")
		endShells(b, e, prefix)
	}
}

// startIdleShells starts n idle PTY shells, prefix0 to prefix(n-1), from
// workers connections at once.
func startIdleShells(b *testing.B, e *testEnv, prefix string, n, workers int) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := e.dial(b, e.token(b, "bench", allScopes...))
			defer c.close()
			for i := w; i < n; i += workers {
				c.send(b, wire.Request{Type: wire.TypeStart, ID: fmt.Sprint(prefix, i), PTY: &wire.Size{Rows: 24, Cols: 80}, Command: "/bin/sh", TimeoutMS: 3600_000})
				c.expect(b, wire.MsgStarted)
			}
		}()
	}
	wg.Wait()
}

// endShells cancels the running executions of "bench" whose IDs start
// with prefix and waits, at most two minutes, until each has a result.
func endShells(b *testing.B, e *testEnv, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sup := e.srv.cfg.Supervisor
	var ended []string
	for _, info := range sup.List("bench") {
		if strings.HasPrefix(info.ID, prefix) && info.Result == nil {
			sup.Cancel("bench", info.ID)
			ended = append(ended, info.ID)
		}
	}
	for _, id := range ended {
		if info, err := sup.Wait(ctx, "bench", id, 1<<62, time.Minute); err != nil || info.Result == nil {
			b.Fatalf("end %s: %+v %v", id, info, err)
		}
	}
}

// memUse is the Go heap in use plus goroutine stacks.
func memUse() int64 {
	heap, stacks := memSplit()
	return heap + stacks
}

// memSplit is the Go heap in use and the goroutine stacks, after a
// collection. Signed: the benchmarks subtract them, and a figure that
// fell between two samples must come out negative, not wrapped.
func memSplit() (heap, stacks int64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse), int64(m.StackInuse)
}

func threads() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// BenchmarkFanOut100 sends one execution's output to 100 viewers on 100
// connections; reports the bytes delivered to all viewers per second.
func BenchmarkFanOut100(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.MaxConnsPerSubject = 200; c.Ring = replay.Config{MaxBytes: 64 << 20} })
	tok := e.token(b, "bench", allScopes...)
	owner := e.dial(b, tok)
	defer owner.close()
	i := 0
	for b.Loop() {
		i++
		id := fmt.Sprint("fan-", i)
		owner.send(b, wire.Request{Type: wire.TypeStart, ID: id, Command: "/bin/sh", Args: []string{"-c", "read x; head -c 4M /dev/zero | tr '\\0' y"}})
		owner.expect(b, wire.MsgStarted)
		viewers := make([]*client, 100)
		for v := range viewers {
			viewers[v] = e.dial(b, tok)
			viewers[v].send(b, wire.Request{Type: wire.TypeAttach, ID: id, ReadOnly: true})
			viewers[v].expect(b, wire.MsgAttached)
		}
		owner.send(b, wire.Request{Type: wire.TypeAttach, ID: id})
		att, _ := owner.expect(b, wire.MsgAttached)
		owner.sendInput(b, att.Channel, 0, "go\n")
		var wg sync.WaitGroup
		for _, v := range viewers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer v.close()
				if n := drainOutputQuiet(v); n != 4<<20 {
					b.Errorf("viewer got %d bytes", n)
				}
			}()
		}
		drain(b, owner, drainOptions{})
		wg.Wait()
	}
	b.SetBytes(100 * 4 << 20)
}

func drainOutputQuiet(c *client) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := 0
	for {
		f, err := c.read(ctx)
		if err != nil {
			return n
		}
		if f.out != nil {
			n += len(f.out.Data)
		} else if f.msg.Type == wire.MsgExit {
			return n
		}
	}
}

// newRoomyEnv is an environment on the real sandbox whose supervisor has
// room for twice n executions, running and retained, and whose subject
// may open conns connections, starting at any rate.
func newRoomyEnv(b *testing.B, n, conns int) *testEnv {
	return newEnv(b, func(c *Config) {
		c.StartsPerMinute, c.MaxConnsPerSubject = 1<<20, conns
		sup, err := session.New(session.Config{Launcher: session.SandboxLauncher(needLauncher(b)),
			MaxRunning: 2 * n, MaxRunningPerOwner: 2 * n, MaxRetained: 2 * n, MaxRetainedPerOwner: 2 * n})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { sup.Close(context.Background()) })
		c.Supervisor = sup
	})
}

// BenchmarkRetainedExecutions finishes 500 short PTY commands and reports
// termgate's memory per retained finished execution (heap and goroutine
// stacks, after a collection), its final screen snapshot and output
// history included: "true" prints nothing, "screen" fills an 80x24
// terminal with text (issue 47's target: at most 64 KiB each). Each
// iteration has a gateway and supervisor of its own: nothing removes a
// retained execution before its retention ends.
func BenchmarkRetainedExecutions(b *testing.B) {
	const n = 500
	for _, v := range []struct{ name, script string }{
		{"true", "true"},
		{"screen", "i=0; while [ $i -lt 24 ]; do echo \"line $i: the quick brown fox jumps over the lazy dog 0123456789 abcdefghij\"; i=$((i+1)); done"},
	} {
		b.Run(v.name, func(b *testing.B) {
			for b.Loop() {
				e := newRoomyEnv(b, n, 64)
				prefix := "retained-"
				heap0, stacks0 := memSplit()
				var wg sync.WaitGroup
				for w := range 8 {
					wg.Go(func() {
						c := e.dial(b, e.token(b, "bench", allScopes...))
						defer c.close()
						for i := w; i < n; i += 8 {
							c.send(b, wire.Request{Type: wire.TypeStart, ID: fmt.Sprint(prefix, i), PTY: &wire.Size{Rows: 24, Cols: 80}, Command: "/bin/sh", Args: []string{"-c", v.script}})
							c.expect(b, wire.MsgStarted)
						}
					})
				}
				wg.Wait()
				waitFinished(b, e, prefix, n)
				heap1, stacks1 := memSplit()
				b.ReportMetric(float64(heap1+stacks1-heap0-stacks0)/n/1024, "KiB/retained")
				b.ReportMetric(float64(stacks1-stacks0)/n/1024, "KiB-stacks/retained")
			}
		})
	}
}

// waitFinished waits, at most two minutes, until the n executions of
// "bench" whose IDs start with prefix each have a result.
func waitFinished(b *testing.B, e *testEnv, prefix string, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sup := e.srv.cfg.Supervisor
	for i := range n {
		id := fmt.Sprint(prefix, i)
		if info, err := sup.Wait(ctx, "bench", id, 1<<62, time.Minute); err != nil || info.Result == nil {
			b.Fatalf("wait %s: %+v %v", id, info, err)
		}
	}
}
