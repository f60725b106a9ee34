package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	tgclient "github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
)

// benchServers serves on HOST: port 9100 an echo, port 9101 SIZE bytes
// then the end, port 9102 a sink that answers how many bytes it read
// when the client ends what it sends; for each connection.
const benchServers = `
import socket, sys, threading
host, size = sys.argv[1], int(sys.argv[2])
def serve(port, handle):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port)); s.listen()
    while True:
        c, _ = s.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()
def echo(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        b = c.recv(65536)
        if not b: break
        c.sendall(b)
    c.close()
def source(c):
    chunk, left = b"x" * (1 << 20), size
    while left > 0:
        n = min(left, len(chunk)); c.sendall(chunk[:n]); left -= n
    c.close()
def sink(c):
    n, buf = 0, bytearray(1 << 20)
    while True:
        k = c.recv_into(buf)
        if not k: break
        n += k
    c.sendall(str(n).encode()); c.close()
threading.Thread(target=serve, args=(9101, source), daemon=True).start()
threading.Thread(target=serve, args=(9102, sink), daemon=True).start()
print("serving", flush=True)
serve(9100, echo)
`

// forwardBench is a gateway over the real sandbox with benchServers in
// an execution, the same servers on the host's 127.0.0.6, and a client
// with the forward scope.
type forwardBench struct {
	e  *testEnv
	id string
	c  *tgclient.Client
}

func newForwardBench(b testing.TB, size int64) *forwardBench {
	b.Helper()
	python, err := exec.LookPath("python3")
	sandboxtest.Need(b, "python3", err)
	e := newEnv(b, func(c *Config) { c.Sandbox.MaxTimeout = time.Hour })
	info, err := e.sup.Start(context.Background(), "bench", "servers", session.Spec{
		Policy:  sandbox.Policy{Command: []string{"python3", "-c", benchServers, "127.0.0.1", fmt.Sprint(size)}, Workspace: sandboxtest.Dir(b)},
		Timeout: time.Hour,
		Ring:    replay.Config{MaxBytes: 1 << 20},
	})
	if err != nil {
		b.Fatal(err)
	}
	host := exec.Command(python, "-c", benchServers, "127.0.0.6", fmt.Sprint(size))
	if err := host.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { host.Process.Kill(); host.Wait() })
	if !sandboxtest.Eventually(b, 30*time.Second, func() bool {
		l, err := e.sup.Ports().Listening("bench", info.ID)
		c, derr := net.Dial("tcp", "127.0.0.6:9100")
		if derr == nil {
			c.Close()
		}
		return err == nil && len(l) == 3 && derr == nil
	}) {
		b.Fatal("the servers never listened")
	}
	tok := e.token(b, "bench", ScopeForward)
	c, err := tgclient.Dial(context.Background(), tgclient.Config{URL: e.http.URL, Token: func(context.Context) (string, error) { return tok, nil }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return &forwardBench{e: e, id: info.ID, c: c}
}

// BenchmarkForwardThroughput reads 1 GiB from a program's port through a
// forward stream (the Go client, acking as it reads), against the same
// program on the host's loopback read directly, and through the ceilings
// of a relay with the forward's two hops (program to relay, relay to
// reader): a bare TCP relay that copies through a buffer, as any
// WebSocket relay must, and one that splices (no copy in user space).
func BenchmarkForwardThroughput(b *testing.B) {
	const size = 1 << 30
	fb := newForwardBench(b, size)
	read := func(b *testing.B, dial func() (io.ReadCloser, error)) {
		b.SetBytes(size)
		buf := make([]byte, 256<<10)
		for b.Loop() {
			c, err := dial()
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{c}, buf)
			c.Close()
			if err != nil || n != size {
				b.Fatalf("read %d bytes: %v", n, err)
			}
		}
	}
	b.Run("direct", func(b *testing.B) {
		read(b, func() (io.ReadCloser, error) { return net.Dial("tcp", "127.0.0.6:9101") })
	})
	for _, splice := range []bool{false, true} {
		b.Run(map[bool]string{false: "tcp-relay-copy", true: "tcp-relay-splice"}[splice], func(b *testing.B) {
			addr := tcpRelay(b, "127.0.0.6:9101", splice)
			read(b, func() (io.ReadCloser, error) { return net.Dial("tcp", addr) })
		})
	}
	b.Run("ws-relay", func(b *testing.B) {
		url := wsRelay(b, "127.0.0.6:9101")
		read(b, func() (io.ReadCloser, error) {
			ws, _, err := websocket.Dial(context.Background(), url, nil)
			if err != nil {
				return nil, err
			}
			ws.SetReadLimit(-1)
			return wsReadCloser{&wsConn{ws: ws}}, nil
		})
	})
	b.Run("forward", func(b *testing.B) {
		read(b, func() (io.ReadCloser, error) { return fb.c.Forward(context.Background(), fb.id, 9101) })
	})
}

// BenchmarkForwardUpload writes 1 GiB to a program's port through a
// forward stream (the Go client, within the server's credit), against
// the same program on the host's loopback written directly.
func BenchmarkForwardUpload(b *testing.B) {
	const size = 1 << 30
	fb := newForwardBench(b, 0)
	write := func(b *testing.B, dial func() (net.Conn, error)) {
		b.SetBytes(size)
		buf := make([]byte, 256<<10)
		for b.Loop() {
			c, err := dial()
			if err != nil {
				b.Fatal(err)
			}
			for left := size; left > 0; left -= len(buf) {
				if _, err := c.Write(buf[:min(left, len(buf))]); err != nil {
					b.Fatal(err)
				}
			}
			c.(interface{ CloseWrite() error }).CloseWrite()
			got, err := io.ReadAll(c)
			c.Close()
			if err != nil || string(got) != fmt.Sprint(size) {
				b.Fatalf("the sink read %q: %v", got, err)
			}
		}
	}
	b.Run("direct", func(b *testing.B) {
		write(b, func() (net.Conn, error) { return net.Dial("tcp", "127.0.0.6:9102") })
	})
	b.Run("forward", func(b *testing.B) {
		write(b, func() (net.Conn, error) { return fb.c.Forward(context.Background(), fb.id, 9102) })
	})
}

// wsReadCloser reads a relay's stream until its close.
type wsReadCloser struct{ *wsConn }

func (r wsReadCloser) Read(p []byte) (int, error) {
	n, err := r.wsConn.Read(p)
	if websocket.CloseStatus(err) != -1 || err != nil && strings.Contains(err.Error(), "EOF") {
		return n, io.EOF
	}
	return n, err
}

func (r wsReadCloser) Close() error { return r.ws.CloseNow() }

// roundTrips times n 100-byte request/response round trips on rw.
func roundTrips(b *testing.B, rw io.ReadWriter, n int) []time.Duration {
	msg, back := []byte(strings.Repeat("r", 100)), make([]byte, 100)
	var rtts []time.Duration
	for range n {
		start := time.Now()
		if _, err := rw.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(rw, back); err != nil {
			b.Fatal(err)
		}
		rtts = append(rtts, time.Since(start))
	}
	return rtts
}

// tcpRelay listens on 127.0.0.7 and relays each connection's reads from
// target, copying through a buffer or splicing (io.Copy between TCP
// connections); it returns its address.
func tcpRelay(b *testing.B, target string, splice bool) string {
	l, err := net.Listen("tcp", "127.0.0.7:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				t, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer t.Close()
				if splice {
					io.Copy(c, t)
					return
				}
				io.CopyBuffer(struct{ io.Writer }{c}, struct{ io.Reader }{t}, make([]byte, 256<<10))
			}()
		}
	}()
	return l.Addr().String()
}

// wsRelay is the floor a forward stream is measured against: a bare
// WebSocket server that relays each binary message to a TCP connection
// and what comes back as binary messages, nothing else.
func wsRelay(b *testing.B, target string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		t, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		defer t.Close()
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := t.Read(buf)
				if err != nil {
					ws.Close(websocket.StatusNormalClosure, "")
					return
				}
				if ws.Write(context.Background(), websocket.MessageBinary, buf[:n]) != nil {
					return
				}
			}
		}()
		for {
			_, m, err := ws.Read(context.Background())
			if err != nil {
				return
			}
			t.Write(m)
		}
	}))
	b.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// wsConn reads and writes a WebSocket's binary messages as a stream.
type wsConn struct {
	ws  *websocket.Conn
	buf []byte
}

func (c *wsConn) Write(p []byte) (int, error) {
	return len(p), c.ws.Write(context.Background(), websocket.MessageBinary, p)
}

func (c *wsConn) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		_, m, err := c.ws.Read(context.Background())
		if err != nil {
			return 0, err
		}
		c.buf = m
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

// BenchmarkForwardLatency times 100-byte request/response round trips
// to an echo in a sandbox through a forward stream, against the floor of
// a bare WebSocket relay to the same echo on the host; it reports the
// p50 of each and what the stream adds.
func BenchmarkForwardLatency(b *testing.B) {
	const n = 2000
	fb := newForwardBench(b, 1)
	ws, _, err := websocket.Dial(context.Background(), wsRelay(b, "127.0.0.6:9100"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ws.CloseNow()
	fc, err := fb.c.Forward(context.Background(), fb.id, 9100)
	if err != nil {
		b.Fatal(err)
	}
	defer fc.Close()
	var floor, fwd []time.Duration
	for b.Loop() {
		floor = append(floor, roundTrips(b, &wsConn{ws: ws}, n)...)
		fwd = append(fwd, roundTrips(b, fc, n)...)
	}
	slices.Sort(floor)
	slices.Sort(fwd)
	p50 := func(d []time.Duration) float64 { return float64(d[len(d)/2].Microseconds()) }
	b.ReportMetric(p50(floor), "µs-p50-ws-relay")
	b.ReportMetric(p50(fwd), "µs-p50-forward")
	b.ReportMetric(p50(fwd)-p50(floor), "µs-p50-added")
}

// BenchmarkEchoWhileForwarding times keystroke echoes on a terminal
// channel while, on the same connection, a forward stream reads 100 MiB
// (a round of it per iteration), against keystrokes alone, and while the
// same transfer runs on a connection of its own (what the machine's load
// alone does to the terminal). Keystrokes are typed one after another
// for as long as a transfer lasts, and only those it overlapped count.
func BenchmarkEchoWhileForwarding(b *testing.B) {
	const size = 100 << 20
	fb := newForwardBench(b, size)
	tok := fb.e.token(b, "bench", append(allScopes, ScopeForward)...)
	c := fb.e.dial(b, tok)
	defer c.close()
	c.send(b, wire.Request{Type: wire.TypeStart, ID: "echo", Command: "/bin/sh", Args: []string{"-c", "stty raw -echo; cat"}, PTY: &wire.Size{Rows: 24, Cols: 80}, Attach: true, TimeoutMS: 3600_000})
	att, _ := c.expect(b, wire.MsgAttached)
	echoes := make(chan byte, 16)
	streams := make(chan wire.Message, 4)
	var down int
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // the one reader: echoes, forward frames (acked at once), stream messages
		var scratch bytes.Buffer // as an efficient client reads: into one buffer, kept
		for {
			typ, r, err := c.ws.Reader(ctx)
			if err == nil {
				scratch.Reset()
				_, err = scratch.ReadFrom(r)
			}
			if err != nil {
				close(echoes)
				return
			}
			m := scratch.Bytes()
			switch {
			case typ == websocket.MessageBinary && m[0] == wire.FrameForward:
				s, data, _ := wire.DecodeForward(m)
				down += len(data)
				ack, _ := json.Marshal(wire.Request{Type: wire.TypeForwardAck, Stream: s, Bytes: uint64(len(data))})
				go c.ws.Write(ctx, websocket.MessageText, ack)
			case typ == websocket.MessageBinary:
				if o, err := wire.DecodeOutput(m); err == nil && len(o.Data) > 0 {
					echoes <- o.Data[len(o.Data)-1]
				}
			default:
				var msg wire.Message
				json.Unmarshal(m, &msg)
				if strings.HasPrefix(msg.Type, "forward") && msg.Type != wire.MsgForwardAck {
					streams <- msg
				}
			}
		}
	}()
	var offset uint64
	// keys types n keystrokes, or until over is closed (then it keeps the
	// round trips that ended before), and returns their round trips.
	keys := func(n int, over <-chan struct{}) []time.Duration {
		var rtts []time.Duration
		for i := range n {
			k := byte('a' + i%26)
			start := time.Now()
			c.sendInput(b, att.Channel, offset, string(k))
			offset++
			for got := range echoes {
				if got == k {
					break
				}
			}
			select {
			case <-over:
				return rtts
			default:
			}
			rtts = append(rtts, time.Since(start))
		}
		return rtts
	}
	// Keystrokes while a transfer runs: as many as it lasts, at most.
	const duringMax = 100_000
	keys(1, nil) // stty has run
	var alone, busy, elsewhere []time.Duration
	var shared time.Duration // how long the transfers beside the terminal took
	for b.Loop() {
		alone = append(alone, keys(echoKeystrokes, nil)...)
		other, over := make(chan error, 1), make(chan struct{})
		go func() { // the same transfer on a connection of its own: what the machine's load alone does
			defer close(over)
			fc, err := fb.c.Forward(context.Background(), fb.id, 9101)
			if err == nil {
				_, err = io.Copy(io.Discard, struct{ io.Reader }{fc})
				fc.Close()
			}
			other <- err
		}()
		elsewhere = append(elsewhere, keys(duringMax, over)...)
		if err := <-other; err != nil {
			b.Fatal(err)
		}
		c.send(b, wire.Request{Type: wire.TypeForward, Req: "f", ID: fb.id, Port: 9101})
		<-streams // forwarded
		began := time.Now()
		over = make(chan struct{})
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			for m := range streams {
				if m.Type == wire.MsgForwardEOF {
					shared += time.Since(began)
					close(over)
					c.send(b, wire.Request{Type: wire.TypeForwardClose, Stream: m.Stream})
				}
				if m.Type == wire.MsgForwardEnd {
					return
				}
			}
		}()
		busy = append(busy, keys(duringMax, over)...)
		<-ended
	}
	slices.Sort(alone)
	slices.Sort(busy)
	slices.Sort(elsewhere)
	p := func(d []time.Duration, q int) float64 {
		if len(d) == 0 {
			b.Fatal("no keystroke overlapped a transfer")
		}
		return float64(d[len(d)*q/100].Microseconds())
	}
	b.ReportMetric(p(alone, 50), "µs-p50-alone")
	b.ReportMetric(p(alone, 99), "µs-p99-alone")
	b.ReportMetric(p(busy, 50), "µs-p50-forwarding")
	b.ReportMetric(p(busy, 99), "µs-p99-forwarding")
	b.ReportMetric(p(elsewhere, 50), "µs-p50-forwarding-elsewhere")
	b.ReportMetric(p(elsewhere, 99), "µs-p99-forwarding-elsewhere")
	b.ReportMetric(float64(len(busy)), "keys-forwarding")
	b.ReportMetric(float64(b.N)*size/1e6/shared.Seconds(), "MB/s-forwarding")
	c.send(b, wire.Request{Type: wire.TypeCancel, ID: "echo"})
}
