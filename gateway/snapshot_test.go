package gateway

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/termgate/termgate/gateway/wire"
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
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "tui", Command: "/bin/sh", Args: []string{"-c", tuiScript},
		PTY: &wire.Size{Rows: 24, Cols: 80}, Flow: wire.FlowLive})
	c.expect(t, wire.MsgStarted)
	if !sandboxtest.Eventually(t, time.Minute, func() bool {
		info, _ := e.sup.Get("acme", "tui")
		return info.Result != nil
	}) {
		t.Fatal("the TUI did not end")
	}
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
