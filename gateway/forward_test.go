package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/audit"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
)

// portServers is a program that serves, on its sandbox's 127.0.0.1, an
// echo on port 9000 (what it reads, until the client ends, then it
// ends), a source on port 9001 (1 MiB, then it ends) and, on port 9002,
// a sink that never reads, with the smallest receive buffer.
const portServers = `
import socket, threading
def serve(port, handle):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port)); s.listen()
    while True:
        c, _ = s.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()
def echo(c):
    while True:
        b = c.recv(65536)
        if not b: break
        c.sendall(b)
    c.close()
def source(c):
    c.sendall(b"x" * (1 << 20)); c.close()
def stuck(c):
    threading.Event().wait()
threading.Thread(target=serve, args=(9001, source), daemon=True).start()
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
t.bind(("127.0.0.1", 9002)); t.listen()
threading.Thread(target=lambda: [threading.Thread(target=stuck, args=(t.accept()[0],), daemon=True).start() for _ in iter(int, 1)], daemon=True).start()
print("serving", flush=True)
serve(9000, echo)
`

// forwardEnv is a gateway over the real sandbox (tweaked) and an
// execution that serves portServers.
func forwardEnv(t *testing.T, tweak ...func(*Config)) (*testEnv, string) {
	t.Helper()
	_, err := exec.LookPath("python3")
	sandboxtest.Need(t, "python3", err)
	var tw func(*Config)
	if len(tweak) > 0 {
		tw = tweak[0]
	}
	e := newEnv(t, tw)
	var info session.Info
	info, err = e.sup.Start(t.Context(), "acme", "ports", session.Spec{
		Policy: sandbox.Policy{Command: []string{"python3", "-c", portServers}, Workspace: sandboxtest.Dir(t)},
		Ring:   replay.Config{MaxBytes: 1 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitListening(t, e, info.ID, 3)
	return e, info.ID
}

// waitListening waits until acme's execution id listens on n ports.
func waitListening(t testing.TB, e *testEnv, id string, n int) {
	t.Helper()
	var l []netip.AddrPort
	var err error
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool {
		l, err = e.sup.Ports().Listening("acme", id)
		return err == nil && len(l) == n
	}) {
		t.Fatalf("%s listens on %v (%v), want %d ports", id, l, err, n)
	}
}

// readForward reads the connection's next forward frame or message,
// skipping others.
func readForward(t *testing.T, c *client) (stream uint32, data []byte, m *wire.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		typ, b, err := c.ws.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if typ == websocket.MessageBinary {
			id, data, err := wire.DecodeForward(b)
			if err != nil {
				t.Fatalf("a binary frame that is no forward frame: %v", err)
			}
			return id, data, nil
		}
		var msg wire.Message
		json.Unmarshal(b, &msg)
		switch msg.Type {
		case wire.MsgForwarded, wire.MsgForwardAck, wire.MsgForwardEOF, wire.MsgForwardEnd, wire.MsgError:
			return 0, nil, &msg
		}
	}
}

func (c *client) sendForward(t *testing.T, stream uint32, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageBinary, wire.AppendForward(nil, stream, data)); err != nil {
		t.Fatal(err)
	}
}

// openForward asks for a stream to port and returns its number.
func openForward(t *testing.T, c *client, id string, port int) uint32 {
	t.Helper()
	c.send(t, wire.Request{Type: wire.TypeForward, Req: "f", ID: id, Port: port})
	_, _, m := readForward(t, c)
	if m == nil || m.Type != wire.MsgForwarded || m.Stream == 0 || m.Window != ForwardWindow {
		t.Fatalf("forward answered %+v", m)
	}
	return m.Stream
}

// TestForwardEchoes: bytes sent on a stream reach the program's port and
// its answers come back; the client's half-close reaches the program,
// whose end comes as forward-eof, then forward-end with the bytes each
// way; every write is acknowledged with credit.
func TestForwardEchoes(t *testing.T) {
	t.Parallel()
	e, id := forwardEnv(t)
	c := e.dial(t, e.token(t, "acme", ScopeForward))
	defer c.close()
	s := openForward(t, c, id, 9000)
	c.sendForward(t, s, []byte("hello, "))
	c.sendForward(t, s, []byte("port"))
	c.send(t, wire.Request{Type: wire.TypeForwardClose, Stream: s})
	var got []byte
	var acked uint64
	var eof bool
	for {
		id, data, m := readForward(t, c)
		if m == nil {
			if id != s {
				t.Fatalf("a frame of stream %d", id)
			}
			got = append(got, data...)
			continue
		}
		switch m.Type {
		case wire.MsgForwardAck:
			acked += m.Bytes
			continue
		case wire.MsgForwardEOF:
			eof = true
			continue
		}
		if m.Type != wire.MsgForwardEnd || m.Reason != wire.ForwardClosed || m.Up != 11 || m.Down != 11 {
			t.Errorf("the stream ended with %+v", m)
		}
		break
	}
	if string(got) != "hello, port" || !eof || acked != 11 {
		t.Errorf("read %q, eof %v, acked %d", got, eof, acked)
	}
}

// TestForwardWaitsForCredit: a program that sends more than the window
// gets exactly the window through until the client gives credit; then
// the rest comes, all of it.
func TestForwardWaitsForCredit(t *testing.T) {
	t.Parallel()
	e, id := forwardEnv(t)
	c := e.dial(t, e.token(t, "acme", ScopeForward))
	defer c.close()
	openForward(t, c, id, 9001)
	var got int
	for got < ForwardWindow {
		_, data, m := readForward(t, c)
		if m != nil {
			t.Fatalf("%+v before the window was full", m)
		}
		got += len(data)
	}
	if got != ForwardWindow {
		t.Fatalf("read %d bytes without credit, want the window's %d", got, ForwardWindow)
	}
	// Nothing more comes without credit.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, b, err := c.ws.Read(ctx)
	cancel()
	if err == nil {
		t.Fatalf("a message past the window without credit: %q", b[:min(len(b), 64)])
	}
	c = e.dial(t, e.token(t, "acme", ScopeForward)) // the timed-out read closed the first
	defer c.close()
	s := openForward(t, c, id, 9001)
	total := 0
	for {
		_, data, m := readForward(t, c)
		if m != nil {
			if m.Type == wire.MsgForwardEOF {
				c.send(t, wire.Request{Type: wire.TypeForwardClose, Stream: s}) // nothing to send either
				continue
			}
			if m.Type != wire.MsgForwardEnd || m.Down != 1<<20 {
				t.Errorf("end %+v", m)
			}
			break
		}
		total += len(data)
		c.send(t, wire.Request{Type: wire.TypeForwardAck, Stream: s, Bytes: uint64(len(data))})
	}
	if total != 1<<20 {
		t.Errorf("read %d bytes, want 1 MiB", total)
	}
}

// TestForwardRefusals: a token without exec:forward is forbidden (write
// does not imply it), a port nothing listens on is refused, another
// tenant's execution is not found, and a client that sends past its
// credit has its stream ended with reason window.
func TestForwardRefusals(t *testing.T) {
	t.Parallel()
	e, id := forwardEnv(t)
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	for _, tc := range []struct {
		c    *client
		id   string
		port int
		code string
	}{
		{c, id, 9000, wire.CodeForbidden},
		{e.dial(t, e.token(t, "acme", ScopeForward)), id, 9003, wire.CodeRefused},
		{e.dial(t, e.token(t, "other", ScopeForward)), id, 9000, wire.CodeNotFound},
	} {
		tc.c.send(t, wire.Request{Type: wire.TypeForward, Req: "f", ID: tc.id, Port: tc.port})
		if _, _, m := readForward(t, tc.c); m == nil || m.Type != wire.MsgError || m.Error != tc.code || m.Req != "f" {
			t.Errorf("forward to %d: %+v, want %s", tc.port, m, tc.code)
		}
	}
	f := e.dial(t, e.token(t, "acme", ScopeForward))
	defer f.close()
	// The sink takes a few KiB; the kernel's buffers toward it take a
	// few MiB (tcp_wmem's largest, 4 MiB by default); what follows waits
	// in the server, and past the window ends the stream.
	s := openForward(t, f, id, 9002)
	half := bytes.Repeat([]byte("y"), ForwardWindow/2)
	for range 24 {
		f.sendForward(t, s, half)
	}
	for {
		_, _, m := readForward(t, f)
		if m != nil && m.Type == wire.MsgForwardEnd {
			if m.Reason != wire.ForwardWindow {
				t.Errorf("a stream sent past its credit ended %+v, want reason window", m)
			}
			break
		}
	}
}

// TestPortsMessages: a channel attached with ports is told what its
// execution listens on right after attached, and again once a program
// starts listening on another port.
func TestPortsMessages(t *testing.T) {
	t.Parallel()
	_, err := exec.LookPath("python3")
	sandboxtest.Need(t, "python3", err)
	e := newEnv(t, nil)
	script := `
import socket, sys
def listen(port):
    s = socket.socket(); s.bind(("127.0.0.1", port)); s.listen(); return s
a = listen(9200)
print("one", flush=True)
sys.stdin.readline()
b = listen(9201)
print("two", flush=True)
sys.stdin.readline()
`
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "listens", Command: "/bin/sh", Args: []string{"-c", "exec python3 -c '" + strings.ReplaceAll(script, "'", `'"'"'`) + "'"}, Attach: true, Ports: true})
	att, _ := c.expect(t, wire.MsgAttached)
	ports := func() []wire.Port {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		for {
			f, err := c.read(ctx)
			if err != nil {
				t.Fatalf("no ports message: %v", err)
			}
			if f.msg != nil && f.msg.Type == wire.MsgPorts {
				if f.msg.Channel != att.Channel {
					t.Errorf("ports for channel %d, want %d", f.msg.Channel, att.Channel)
				}
				return f.msg.Ports
			}
		}
	}
	// The first message may come before the program listens.
	got := ports()
	for len(got) == 0 {
		got = ports()
	}
	if want := []wire.Port{{Address: "127.0.0.1", Port: 9200}}; !slices.Equal(got, want) {
		t.Fatalf("ports %v, want %v", got, want)
	}
	c.sendInput(t, att.Channel, 0, "\n")
	if got, want := ports(), []wire.Port{{Address: "127.0.0.1", Port: 9200}, {Address: "127.0.0.1", Port: 9201}}; !slices.Equal(got, want) {
		t.Errorf("ports after the second listen %v, want %v", got, want)
	}
}

// TestPortWatchesAreBounded: beyond MaxPortWatches executions, a watch
// is refused, and a watcher's leaving makes room.
func TestPortWatchesAreBounded(t *testing.T) {
	t.Parallel()
	w := &portWatch{watched: map[watchKey]*watchedPorts{}, running: true}
	for i := range MaxPortWatches {
		w.watched[watchKey{"t", fmt.Sprint(i)}] = &watchedPorts{chans: map[*channel]*conn{{execID: fmt.Sprint(i)}: nil}}
	}
	ch := &channel{execID: "one-more"}
	if w.watch(nil, ch, "t") {
		t.Fatal("a watch beyond the bound was taken")
	}
	for c := range w.watched[watchKey{"t", "0"}].chans {
		w.emptied = make(chan struct{}, 1)
		w.unwatch(c, "t")
	}
	if !w.watch(nil, ch, "t") {
		t.Error("no room after a watcher left")
	}
}

// TestForwardAudited: a stream opened and ended, with its bytes each
// way, and a refused one are in the audit trail.
func TestForwardAudited(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := audit.Open(audit.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	e, id := forwardEnv(t, func(c *Config) { c.Audit = a })
	t.Cleanup(func() { a.Close() })
	c := e.dial(t, e.token(t, "acme", ScopeForward))
	defer c.close()
	s := openForward(t, c, id, 9000)
	c.sendForward(t, s, []byte("hi"))
	c.send(t, wire.Request{Type: wire.TypeForwardClose, Stream: s})
	for {
		if _, _, m := readForward(t, c); m != nil && m.Type == wire.MsgForwardEnd {
			break
		}
	}
	c.send(t, wire.Request{Type: wire.TypeForward, Req: "x", ID: id, Port: 9003})
	if _, _, m := readForward(t, c); m == nil || m.Error != wire.CodeRefused {
		t.Fatalf("forward to 9003: %+v", m)
	}
	var recs []map[string]any
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool {
		recs = readAudit(t, path, 0)
		return len(find(recs, map[string]any{"event": "forward", "code": "refused"})) == 1
	}) {
		t.Fatalf("no refused forward in %v", recs)
	}
	if r := find(recs, map[string]any{"event": "forward", "outcome": "ok", "port": float64(9000), "execution": id}); len(r) != 1 {
		t.Errorf("the stream's opening: %v in %v", r, recs)
	}
	if r := find(recs, map[string]any{"event": "forward-end", "reason": "closed", "bytes_up": float64(2), "bytes_down": float64(2)}); len(r) != 1 {
		t.Errorf("the stream's end: %v in %v", r, recs)
	}
}

// TestForwardStreamsAreBounded: a connection holds at most MaxStreams
// streams; one more is too_many_streams until one ends.
func TestForwardStreamsAreBounded(t *testing.T) {
	t.Parallel()
	e, id := forwardEnv(t)
	c := e.dial(t, e.token(t, "acme", ScopeForward))
	defer c.close()
	var streams []uint32
	for range MaxStreams {
		streams = append(streams, openForward(t, c, id, 9000))
	}
	c.send(t, wire.Request{Type: wire.TypeForward, Req: "over", ID: id, Port: 9000})
	if _, _, m := readForward(t, c); m == nil || m.Type != wire.MsgError || m.Error != wire.CodeTooManyStreams {
		t.Fatalf("stream %d: %+v, want too_many_streams", MaxStreams+1, m)
	}
	c.send(t, wire.Request{Type: wire.TypeForwardClose, Stream: streams[0], Reset: true})
	for {
		if _, _, m := readForward(t, c); m != nil && m.Type == wire.MsgForwardEnd && m.Stream == streams[0] {
			break
		}
	}
	openForward(t, c, id, 9000)
}

// TestPreviewsAreBounded: a tenant has at most MaxPreviewsPerTenant
// previews alive; one more is 429 capacity until one is revoked.
func TestPreviewsAreBounded(t *testing.T) {
	t.Parallel()
	e, id := forwardEnv(t)
	tok := e.token(t, "acme", ScopeForward)
	path := func(port int) string { return fmt.Sprintf("/v1/executions/%s/ports/%d/preview", id, port) }
	for i := range MaxPreviewsPerTenant {
		if code := e.apiCall(t, http.MethodPost, path(9000+i%2), tok, nil, nil); code != http.StatusCreated {
			t.Fatalf("preview %d: %d", i+1, code)
		}
	}
	var refused struct{ Error string }
	if code := e.apiCall(t, http.MethodPost, path(9000), tok, nil, &refused); code != http.StatusTooManyRequests || refused.Error != wire.CodeCapacity {
		t.Fatalf("preview %d: %d %+v, want 429 capacity", MaxPreviewsPerTenant+1, code, refused)
	}
	if code := e.apiCall(t, http.MethodDelete, path(9001), tok, nil, nil); code != http.StatusNoContent {
		t.Fatalf("revoke: %d", code)
	}
	if code := e.apiCall(t, http.MethodPost, path(9000), tok, nil, nil); code != http.StatusCreated {
		t.Errorf("a preview after revoking: %d", code)
	}
}

// TestForwardConnWriteTo: io.Copy from a Go client's stream (its
// WriteTo) delivers every byte of a transfer of several windows: it
// acknowledges what it wrote, or the transfer would stall at the first
// window.
func TestForwardConnWriteTo(t *testing.T) {
	t.Parallel()
	const size = 3*ForwardWindow + 12345
	fb := newForwardBench(t, size)
	fc, err := fb.c.Forward(t.Context(), fb.id, 9101)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	fc.SetReadDeadline(time.Now().Add(60 * time.Second))
	var got bytes.Buffer
	n, err := fc.WriteTo(struct{ io.Writer }{&got})
	if err != nil || n != size || got.Len() != size || bytes.Count(got.Bytes(), []byte("x")) != size {
		t.Errorf("WriteTo: %d bytes (%d held), %v; want %d bytes of x", n, got.Len(), err, size)
	}
}
