package gateway

import (
	"context"
	"encoding/json"
	"runtime"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session/screen"
)

// colourScript prints 3000 lines of 80 cells, each cell in a truecolor of
// its own: the scrollback's 1000 lines take over 2 MB as a snapshot's
// sequences, twice the largest message.
const colourScript = `l=$(i=0; while [ $i -lt 80 ]; do printf '\033[38;2;%d;%d;%d;48;2;%d;%d;%dmx' $i $((i*2)) $((i*3)) $((i*3)) $((i*2)) $i; i=$((i+1)); done)
n=0; while [ $n -lt 3000 ]; do printf '%s\033[m %d\r\n' "$l" $n; n=$((n+1)); done
printf '\033[7mthe end\033[m'`

// TestSnapshotFitsTheMessageSize: a snapshot never takes a message larger
// than the hello's max_message_bytes; a scrollback too long for one is
// cut to its newest lines, and the screen it restores is still exact.
func TestSnapshotFitsTheMessageSize(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	tok := e.token(t, "acme", allScopes...)
	c := e.dial(t, tok)
	defer c.close()
	runToEnd(t, e, c, "colours", colourScript)

	// The truth, without scrollback: the screen a terminal that saw every
	// byte shows.
	want := screen.New(screen.Config{Rows: 24, Cols: 80, Scrollback: -1})
	want.Write(ptyOutput(t, colourScript, 24, 80))
	got := screen.New(screen.Config{Rows: 24, Cols: 80, Scrollback: -1})

	v := e.dial(t, tok)
	defer v.close()
	v.ws.SetReadLimit(64 << 20) // to see how large a message is, not fail on it
	v.send(t, wire.Request{Type: wire.TypeAttach, ID: "colours", Snapshot: true})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	snapshots := 0
	for done := false; !done; {
		typ, b, err := v.ws.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > DefaultMaxMessageBytes {
			t.Fatalf("a message of %d bytes; the hello announces at most %d", len(b), DefaultMaxMessageBytes)
		}
		if typ == websocket.MessageBinary {
			o, err := wire.DecodeOutput(b)
			if err != nil {
				t.Fatal(err)
			}
			got.Write(o.Data)
			continue
		}
		var m wire.Message
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		switch m.Type {
		case wire.MsgSnapshot:
			snapshots++
			t.Logf("snapshot: %d bytes, %d of data", len(b), len(m.Data))
			got.Write([]byte(m.Data))
		case wire.MsgGap:
			t.Fatalf("a gap %+v where a snapshot with a shorter scrollback fits", m)
		case wire.MsgExit:
			done = true
		}
	}
	if snapshots != 1 {
		t.Fatalf("%d snapshots, want 1", snapshots)
	}
	if w, g := want.Snapshot(nil), got.Snapshot(nil); string(w) != string(g) {
		t.Fatalf("the restored screen differs:\n got %q\nwant %q", tail(g), tail(w))
	}
}

// drawScript fills a 500x500 terminal's screen and scrollback with text,
// then draws on the alternate screen, so that both buffers are in use.
const drawScript = `l=$(i=0; while [ $i -lt 50 ]; do printf '\033[3%dmabcdefghi ' $((i % 8)); i=$((i+1)); done)
n=0; while [ $n -lt 3000 ]; do printf '%s\r\n' "$l"; n=$((n+1)); done
printf '\033[?1049h'
n=0; while [ $n -lt 3000 ]; do printf '%s\r\n' "$l"; n=$((n+1)); done`

// TestEmulatorFreedWhenTheExecutionEnds: once a terminal's execution
// ended, what stays for its retention is its final snapshot, not its
// emulator: 500x500 cells in two buffers held 12 MB each execution.
// Not parallel: it measures the heap.
func TestEmulatorFreedWhenTheExecutionEnds(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.token(t, "acme", allScopes...)
	c := e.dial(t, tok)
	defer c.close()
	before := liveHeap()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "big", Command: "/bin/sh", Args: []string{"-c", drawScript},
		PTY: &wire.Size{Rows: 500, Cols: 500}, Flow: wire.FlowLive})
	c.expect(t, wire.MsgStarted)
	if !sandboxtest.Eventually(t, time.Minute, func() bool {
		info, _ := e.sup.Get("acme", "big")
		return info.Result != nil
	}) {
		t.Fatal("the script did not end")
	}
	if st, _ := e.sup.RingStats("acme", "big"); st.EvictedBytes == 0 {
		t.Fatalf("nothing was evicted (%+v): the test would test nothing", st)
	}
	// The ring (1 MiB), the final snapshot (at most 1 MiB) and the result
	// stay; 12 MB of cells must not.
	// (The result is visible a moment before the execution finished.)
	var grew int64
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool {
		grew = liveHeap() - before
		return grew <= 4<<20
	}) {
		t.Fatalf("the heap holds %.1f MiB more after the execution ended", float64(grew)/(1<<20))
	}
	t.Logf("the heap holds %.1f MiB more after the execution ended", float64(grew)/(1<<20))
}

// liveHeap is the bytes of live heap objects after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestSnapshotBeyondItsBoundsIsAGap: a snapshot larger than the
// connection may queue, or than a message may be (a supervisor configured
// for larger snapshots than the server's messages), is sent as the gap it
// stands in for, and the channel continues after it.
func TestSnapshotBeyondItsBoundsIsAGap(t *testing.T) {
	t.Parallel()
	for name, tweak := range map[string]func(*Config){
		"queued bytes":  func(c *Config) { c.MaxQueuedBytes = 64 << 10 },
		"message bytes": func(c *Config) { c.MaxMessageBytes = 256 << 10 },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tweak)
			tok := e.token(t, "acme", allScopes...)
			c := e.dial(t, tok)
			defer c.close()
			runToEnd(t, e, c, "colours", colourScript)
			c.send(t, wire.Request{Type: wire.TypeAttach, ID: "colours", Snapshot: true})
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			var gap *wire.Message
			for {
				f, err := c.read(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if f.out != nil {
					if gap == nil || f.out.Seq < gap.To {
						t.Fatalf("output %d before the gap ended", f.out.Seq)
					}
					continue
				}
				switch f.msg.Type {
				case wire.MsgSnapshot:
					t.Fatalf("a snapshot of %d bytes of data", len(f.msg.Data))
				case wire.MsgGap:
					gap = f.msg
					if gap.From != 1 || gap.To < 2 || gap.Bytes == 0 || gap.Cause == "" {
						t.Fatalf("gap %+v", *gap)
					}
				}
				if f.msg.Type == wire.MsgExit {
					break
				}
			}
			if gap == nil {
				t.Fatal("no gap")
			}
		})
	}
}
