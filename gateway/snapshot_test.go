package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session/screen"
)

// tuiScript draws 20 coloured lines on the alternate screen once, then
// makes 60,000 small cursor-addressed updates of a counter: more than the
// ring keeps, so the lines that drew the screen are evicted.
const tuiScript = `printf '\033[?1049h\033[2J\033[H\033]0;the tui\007'
i=1; while [ $i -le 20 ]; do printf 'line %d \033[1;3%dmcolour\033[0m\r\n' $i $((i % 8)); i=$((i+1)); done
i=0; while [ $i -lt 60000 ]; do printf '\033[22;1H\033[7mcounter %d\033[0m' $i; i=$((i+1)); done`

// TestSnapshotRestoresTheScreen: a client that attaches after the TUI's
// drawing was evicted gets a snapshot and the retained events, and they
// reproduce exactly the screen of a terminal that saw every byte.
func TestSnapshotRestoresTheScreen(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	tok := e.token(t, "acme", allScopes...)
	c := e.dial(t, tok)
	defer c.close()
	runToEnd(t, e, c, "tui", tuiScript)
	if st, _ := e.sup.RingStats("acme", "tui"); st.EvictedBytes == 0 {
		t.Fatalf("nothing was evicted (%+v): the test would test nothing", st)
	}

	// The truth: the same program on a terminal of its own, every byte.
	want := screen.New(screen.Config{Rows: 24, Cols: 80})
	want.Write(ptyOutput(t, tuiScript, 24, 80))

	got := screen.New(screen.Config{Rows: 24, Cols: 80})
	v := e.dial(t, tok)
	defer v.close()
	v.send(t, wire.Request{Type: wire.TypeAttach, ID: "tui", Snapshot: true})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var snap *wire.Message
	for {
		f, err := v.read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if f.out != nil {
			if snap == nil || f.out.Seq <= snap.Seq {
				t.Fatalf("output %d before or within the snapshot", f.out.Seq)
			}
			got.Write(f.out.Data)
			continue
		}
		switch f.msg.Type {
		case wire.MsgSnapshot:
			snap = f.msg
			got.Write([]byte(snap.Data))
		case wire.MsgGap:
			t.Fatalf("a gap %+v where a snapshot was asked for", *f.msg)
		}
		if f.msg.Type == wire.MsgExit {
			break
		}
	}
	if snap == nil {
		t.Fatal("no snapshot")
	}
	if w, g := want.Snapshot(nil), got.Snapshot(nil); !bytes.Equal(w, g) {
		t.Fatalf("the restored screen differs from the one that saw every byte:\n got %q\nwant %q", tail(g), tail(w))
	}
	if got.Title() != "the tui" {
		t.Fatalf("title %q", got.Title())
	}
}

// runToEnd starts script as id, a 24x80 terminal running live, on c and
// waits (at most a minute) until it ended.
func runToEnd(t *testing.T, e *testEnv, c *client, id, script string) {
	t.Helper()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: id, Command: "/bin/sh", Args: []string{"-c", script},
		PTY: &wire.Size{Rows: 24, Cols: 80}, Flow: wire.FlowLive})
	c.expect(t, wire.MsgStarted)
	if !sandboxtest.Eventually(t, time.Minute, func() bool {
		info, _ := e.sup.Get("acme", id)
		return info.Result != nil
	}) {
		t.Fatalf("%s did not end", id)
	}
}

func tail(b []byte) []byte { return b[max(0, len(b)-400):] }

// ptyOutput runs script in sh on a terminal of rows x cols here, outside
// any sandbox, and returns all it printed.
func ptyOutput(t *testing.T, script string, rows, cols uint16) []byte {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: rows, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, _ := io.ReadAll(f) // EIO once the program is gone
	cmd.Wait()
	return out
}

// watcher follows a terminal execution on its own connection into a
// screen, acknowledging what it processed, as a client would.
type watcher struct {
	c       *client
	scr     *screen.Screen
	mu      sync.Mutex
	last    uint64
	channel uint32
	snap    *wire.Message
	done    chan error
}

// watch attaches to id (with a snapshot when asked) and follows it.
func watch(t *testing.T, e *testEnv, tok, id string, snapshot bool) *watcher {
	t.Helper()
	w := &watcher{c: e.dial(t, tok), scr: screen.New(screen.Config{Rows: 24, Cols: 80}), done: make(chan error, 1)}
	t.Cleanup(w.c.close)
	w.c.send(t, wire.Request{Type: wire.TypeAttach, ID: id, Ack: true, Snapshot: snapshot})
	go func() { w.done <- w.follow() }()
	return w
}

func (w *watcher) follow() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for {
		f, err := w.c.read(ctx)
		if err != nil {
			return err
		}
		var seq uint64
		w.mu.Lock()
		switch {
		case f.out != nil:
			w.scr.Write(f.out.Data)
			seq = f.out.Seq
		case f.msg.Type == wire.MsgAttached:
			w.channel = f.msg.Channel
		case f.msg.Type == wire.MsgSnapshot:
			w.snap = f.msg
			w.scr.Resize(f.msg.Rows, f.msg.Cols) // a terminal of the snapshot's size
			w.scr.Write([]byte(f.msg.Data))
			w.last = f.msg.Seq
		case f.msg.Type == wire.MsgGap:
			w.mu.Unlock()
			return fmt.Errorf("gap %+v", *f.msg)
		case f.msg.Type == wire.MsgEvent:
			if f.msg.Event == "resize" {
				w.scr.Resize(f.msg.Rows, f.msg.Cols)
			}
			seq = f.msg.Seq
		case f.msg.Type == wire.MsgExit:
			w.mu.Unlock()
			return nil
		}
		if seq != 0 {
			if seq != w.last+1 {
				w.mu.Unlock()
				return fmt.Errorf("seq %d after %d", seq, w.last)
			}
			w.last = seq
		}
		last, ch := w.last, w.channel
		w.mu.Unlock()
		if seq != 0 {
			b, _ := json.Marshal(wire.Request{Type: wire.TypeAck, Channel: ch, Seq: last})
			if err := w.c.ws.Write(ctx, websocket.MessageText, b); err != nil {
				return err
			}
		}
	}
}

// state returns the watcher's screen as a snapshot and the last sequence
// it processed.
func (w *watcher) state() ([]byte, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.scr.Snapshot(nil), w.last
}

// TestReattachAfterEvictionMatchesAWatcher: vim after thousands of
// keystrokes and less after thousands of pages, with the history that drew
// their screens evicted: a client that reattaches with a snapshot sees
// exactly what a client that watched every byte sees, resizes included.
func TestReattachAfterEvictionMatchesAWatcher(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
		key          func(i int) string
		keys         int
	}{
		{"vim", "exec vim -u NONE -N -i NONE -n /tmp/notes", func(i int) string {
			if i == 0 {
				return "i"
			}
			return fmt.Sprintf("line %d \033[Dx\r", i)
		}, 3000},
		{"less", "seq 1 500000 | exec less", func(i int) string { return " " }, 4000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, func(c *Config) { c.InputPerSecond, c.Ring = 1<<20, replay.Config{MaxBytes: 64 << 10, MaxEvents: 256} })
			tok := e.token(t, "acme", allScopes...)
			c := e.dial(t, tok)
			defer c.close()
			c.send(t, wire.Request{Type: wire.TypeStart, ID: tc.name, Command: "/bin/sh", Args: []string{"-c", tc.script},
				PTY: &wire.Size{Rows: 24, Cols: 80}, Attach: true, Ack: true})
			att, _ := c.expect(t, wire.MsgAttached)
			first := watch(t, e, tok, tc.name, false)
			var offset uint64
			for i := range tc.keys {
				k := tc.key(i)
				c.sendInput(t, att.Channel, offset, k)
				offset += uint64(len(k))
				if i == tc.keys/2 {
					c.send(t, wire.Request{Type: wire.TypeResize, Channel: att.Channel, Rows: 30, Cols: 100})
				}
				time.Sleep(200 * time.Microsecond)
			}
			c.close() // the driver leaves; the watcher holds the history
			// The driver never acked: until its hold goes, the ring is
			// full and the program waits, which quiet would take for the
			// end of its output.
			if !sandboxtest.Eventually(t, time.Minute, func() bool {
				st, _ := e.sup.RingStats("acme", tc.name)
				return st.Holds <= 1
			}) {
				// Once a leaked count of the input-ack timer, which kept
				// the connection's teardown waiting forever.
				t.Error("the driver's hold outlived its connection by a minute")
			}
			quiet(t, e, tc.name)
			if st, _ := e.sup.RingStats("acme", tc.name); st.EvictedBytes == 0 {
				t.Fatalf("nothing was evicted (%+v): the test would test nothing", st)
			}
			late := watch(t, e, tok, tc.name, true)
			info, _ := e.sup.Get("acme", tc.name)
			if !sandboxtest.Eventually(t, time.Minute, func() bool {
				_, a := first.state()
				_, b := late.state()
				return a >= info.LastSeq && b >= info.LastSeq
			}) {
				t.Fatal("the watchers did not catch up")
			}
			want, _ := first.state()
			got, _ := late.state()
			if late.snap == nil {
				t.Fatal("no snapshot for a reattach after eviction")
			}
			if !bytes.Equal(want, got) {
				t.Fatalf("the reattached screen differs from the watcher's:\n got %q\nwant %q", tail(got), tail(want))
			}
		})
	}
}

// quiet waits until execution id has printed nothing for half a second.
func quiet(t *testing.T, e *testEnv, id string) {
	t.Helper()
	var last uint64
	steady := 0
	for range 600 {
		info, _ := e.sup.Get("acme", id)
		if info.LastSeq == last {
			if steady++; steady == 10 {
				return
			}
		} else {
			steady, last = 0, info.LastSeq
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never went quiet", id)
}
