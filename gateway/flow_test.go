package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/gatewaytest"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session/sessiontest"
)

// follower is an acknowledging client of one execution across
// connections: it attaches with ack, seen and incarnation, acknowledges
// what it processed, and hashes the output.
type follower struct {
	id          string
	after, seen uint64
	incarnation string
	got         uint64 // output bytes received
	lost        uint64 // bytes of gaps
	causes      []string
	sum         hash.Hash
	// pace, when set, runs after each output frame: a slow reader.
	pace func(n int)
	// quitAt, when set, drops the connection once got reaches it.
	quitAt uint64
	// old makes it a client of the protocol before acknowledgements: it
	// attaches with after alone, and never acks.
	old bool
}

func newFollower(id string) *follower { return &follower{id: id, sum: sha256.New()} }

// follow attaches over url and reads until the exit (true) or until the
// connection breaks (false). A duplicate or missing sequence is an error.
func (f *follower) follow(ctx context.Context, url, tok string, readOnly bool) (bool, error) {
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		Subprotocols: []string{wire.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}},
	})
	if err != nil {
		return false, nil // a cutting proxy may cut the handshake itself
	}
	defer ws.CloseNow()
	ws.SetReadLimit(4 << 20)
	c := &client{ws: ws}
	att := wire.Request{Type: wire.TypeAttach, ID: f.id, After: f.after, Seen: f.seen, Incarnation: f.incarnation, Ack: true, ReadOnly: readOnly}
	if f.old {
		att = wire.Request{Type: wire.TypeAttach, ID: f.id, After: f.after, Incarnation: f.incarnation, ReadOnly: readOnly}
	}
	if b, _ := json.Marshal(att); ws.Write(ctx, websocket.MessageText, b) != nil {
		return false, nil
	}
	var channel uint32
	acked := false
	for {
		fr, err := c.read(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return false, err
			}
			return false, nil
		}
		var seq uint64
		switch {
		case fr.out != nil:
			seq = fr.out.Seq
		case fr.msg.Type == wire.MsgAttached:
			channel, f.incarnation, acked = fr.msg.Channel, fr.msg.Incarnation, fr.msg.Ack
			continue
		case fr.msg.Type == wire.MsgError:
			return false, fmt.Errorf("error %s: %s", fr.msg.Error, fr.msg.Message)
		case fr.msg.Type == wire.MsgGap:
			if fr.msg.From != f.after+1 {
				return false, fmt.Errorf("gap %+v after %d", *fr.msg, f.after)
			}
			f.lost += fr.msg.Bytes
			f.seen += fr.msg.Bytes
			f.causes = append(f.causes, fr.msg.Cause)
			f.after = fr.msg.To - 1
			continue
		case fr.msg.Type == wire.MsgEvent || fr.msg.Type == wire.MsgExit:
			seq = fr.msg.Seq
		default:
			continue
		}
		if seq != f.after+1 {
			return false, fmt.Errorf("got seq %d after %d", seq, f.after)
		}
		f.after = seq
		if fr.out != nil {
			f.sum.Write(fr.out.Data)
			f.got += uint64(len(fr.out.Data))
			f.seen += uint64(len(fr.out.Data))
			if f.pace != nil {
				f.pace(len(fr.out.Data))
			}
			if f.quitAt > 0 && f.got >= f.quitAt {
				return false, nil
			}
		}
		if fr.msg != nil && fr.msg.Type == wire.MsgExit {
			return true, nil
		}
		if !acked {
			continue
		}
		ack, _ := json.Marshal(wire.Request{Type: wire.TypeAck, Channel: channel, Seq: seq})
		if ws.Write(ctx, websocket.MessageText, ack) != nil {
			return false, nil
		}
	}
}

// run follows to the exit over up to limit connections.
func (f *follower) run(t *testing.T, url, tok string, limit int) {
	t.Helper()
	// A safety net: 5x the slowest run seen under -race with both cores
	// busy (TestSlowViewerDoesNotSlowTheDriver, 58 s).
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	for range limit {
		done, err := f.follow(ctx, url, tok, false)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			return
		}
	}
	t.Fatalf("no exit after %d connections; %d bytes so far", limit, f.got)
}

func sha(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

// seqStart starts seq 1 n under id, on a terminal or pipes.
func seqStart(t *testing.T, e *testEnv, tok, id string, n int, pty bool, hold time.Duration) {
	t.Helper()
	c := e.dial(t, tok)
	defer c.close()
	req := wire.Request{Type: wire.TypeStart, ID: id, Command: "/bin/sh", Args: []string{"-c", fmt.Sprintf("seq 1 %d", n)}, HoldMS: hold.Milliseconds()}
	if pty {
		req.PTY = &wire.Size{Rows: 24, Cols: 80}
	}
	c.send(t, req)
	c.expect(t, wire.MsgStarted)
}

// TestLosslessAtTheDefaults: seq 1 3000000 (22.9 MB) reaches an
// acknowledging client exactly, at the default ring, whether it reads
// fast, sleeps, or is rate limited, on pipes and on a terminal.
func TestLosslessAtTheDefaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	tok := e.token(t, "acme", allScopes...)
	const n = 3_000_000
	want := map[bool][]byte{false: sha(seqLines(n)), true: sha(strings.ReplaceAll(seqLines(n), "\n", "\r\n"))}
	paces := map[string]func() func(int){
		"fast": func() func(int) { return nil },
		"sleep": func() func(int) {
			i := 0
			return func(int) {
				i++
				if i%64 == 0 {
					time.Sleep(5 * time.Millisecond)
				}
			}
		},
		"rate": func() func(int) { // 50 MiB/s
			start, total := time.Now(), 0
			return func(n int) {
				total += n
				if ahead := time.Duration(float64(total)/(50<<20)*float64(time.Second)) - time.Since(start); ahead > 0 {
					time.Sleep(ahead)
				}
			}
		},
	}
	for name, pace := range paces {
		for _, pty := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/pty=%v", name, pty), func(t *testing.T) {
				t.Parallel()
				id := fmt.Sprintf("seq-%s-%v", name, pty)
				seqStart(t, e, tok, id, n, pty, 0)
				f := newFollower(id)
				f.pace = pace()
				f.run(t, e.url(), tok, 1)
				if f.lost != 0 || !bytes.Equal(f.sum.Sum(nil), want[pty]) {
					t.Fatalf("got %d bytes, lost %d (%v); the transcript differs", f.got, f.lost, f.causes)
				}
			})
		}
	}
}

// TestLosslessThroughCuts: connections cut at random points, 20 runs on
// pipes and 20 on a terminal, at the default ring: every transcript exact.
func TestLosslessThroughCuts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	proxy := gatewaytest.NewCuttingProxy(t, strings.TrimPrefix(e.http.URL, "http://"), gatewaytest.ProxyConfig{MinBudget: 64 << 10, Spread: 1 << 20, Seed: 7})
	tok := e.token(t, "acme", allScopes...)
	const n = 300_000
	for _, pty := range []bool{false, true} {
		want := seqLines(n)
		if pty {
			want = strings.ReplaceAll(want, "\n", "\r\n")
		}
		t.Run(fmt.Sprintf("pty=%v", pty), func(t *testing.T) {
			t.Parallel()
			for run := range 20 {
				id := fmt.Sprintf("cut-%v-%d", pty, run)
				seqStart(t, e, tok, id, n, pty, 0)
				f := newFollower(id)
				f.run(t, "ws://"+proxy.Addr()+"/v1/connect", tok, 2000)
				if f.lost != 0 || !bytes.Equal(f.sum.Sum(nil), sha(want)) {
					t.Fatalf("run %d: got %d bytes, lost %d (%v); want %d exactly", run, f.got, f.lost, f.causes, len(want))
				}
			}
		})
	}
	t.Cleanup(func() { // after the parallel subtests
		if cuts := proxy.Cuts(); cuts < 20 {
			t.Errorf("only %d cuts: resume was hardly exercised", cuts)
		}
	})
}

// TestStalledDriverHoldsTheProgram: a driver that reads nothing stops the
// program with the ring full and memory flat; once it reads, everything
// arrives. A read-only viewer that reads nothing slows nobody and is told
// what it lost, and why.
func TestStalledDriverHoldsTheProgram(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	tok := e.token(t, "acme", allScopes...)
	const n = 1_000_000
	seqStart(t, e, tok, "stall", n, false, 0)
	viewer := e.dial(t, tok)
	defer viewer.close()
	viewer.send(t, wire.Request{Type: wire.TypeAttach, ID: "stall", ReadOnly: true, Ack: true})

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, e.url(), &websocket.DialOptions{
		Subprotocols: []string{wire.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	b, _ := json.Marshal(wire.Request{Type: wire.TypeAttach, ID: "stall", Ack: true})
	ws.Write(ctx, websocket.MessageText, b)
	// Without acks the program stops with about a ring of output.
	var prev uint64
	steady := 0
	for i := 0; steady < 5; i++ {
		if i == 200 {
			t.Fatalf("the program never stopped: %d bytes out", prev)
		}
		time.Sleep(50 * time.Millisecond)
		st, _ := e.sup.RingStats("acme", "stall")
		if st.OutputBytes == prev {
			steady++
		} else {
			steady, prev = 0, st.OutputBytes
		}
	}
	st, _ := e.sup.RingStats("acme", "stall")
	if st.Bytes > 2<<20 || st.OutputBytes >= uint64(len(seqLines(n))) || st.EvictedBytes != 0 {
		t.Fatalf("stalled: ring %+v; want at most about 1 MiB retained, nothing evicted", st)
	}
	ws.CloseNow()
	// The driver comes back (within the hold) and loses nothing.
	f := newFollower("stall")
	f.run(t, e.url(), tok, 1)
	if f.lost != 0 || !bytes.Equal(f.sum.Sum(nil), sha(seqLines(n))) {
		t.Fatalf("after the stall: %d bytes, lost %d", f.got, f.lost)
	}
	// The viewer that never read is told exactly what it lost.
	v := newFollower("stall")
	v.run(t, e.url(), tok, 1)
	if v.got+v.lost != uint64(len(seqLines(n))) {
		t.Fatalf("a late viewer got %d and lost %d of %d", v.got, v.lost, len(seqLines(n)))
	}
}

// TestHoldExpiryGivesAnExactGap: a driver leaves; after the hold the
// program runs free, and the driver coming back is told exactly what it
// lost, with the cause.
func TestHoldExpiryGivesAnExactGap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	tok := e.token(t, "acme", allScopes...)
	const n = 1_000_000
	seqStart(t, e, tok, "expire", n, false, 300*time.Millisecond)
	f := newFollower("expire")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	f.quitAt = 200 << 10 // read a little, then go away
	if _, err := f.follow(ctx, e.url(), tok, false); err != nil {
		t.Fatal(err)
	}
	f.quitAt = 0
	sandboxtest.Eventually(t, 30*time.Second, func() bool {
		info, _ := e.sup.Get("acme", "expire")
		return info.Result != nil
	})
	f.run(t, e.url(), tok, 1)
	total := uint64(len(seqLines(n)))
	if f.lost == 0 || f.got+f.lost != total || len(f.causes) != 1 || f.causes[0] != wire.LossHoldExpired {
		t.Fatalf("got %d + lost %d (%v), want %d in all with one hold_expired gap", f.got, f.lost, f.causes, total)
	}
}

// TestSlowViewerDoesNotSlowTheDriver: a read-only viewer that reads one
// frame a second does not hold the program: the acknowledging driver gets
// all 22.9 MB exactly, and the viewer, reading on, is told what it lost
// and that it was read-only.
func TestSlowViewerDoesNotSlowTheDriver(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	tok := e.token(t, "acme", allScopes...)
	const n = 3_000_000
	seqStart(t, e, tok, "viewed", n, false, 0)
	viewer := newFollower("viewed")
	viewer.pace = func(int) { time.Sleep(time.Second) }
	slow, stop := context.WithCancel(t.Context())
	viewerDone := make(chan error, 1)
	go func() {
		_, err := viewer.follow(slow, e.url(), tok, true)
		viewerDone <- err
	}()
	driver := newFollower("viewed")
	driver.run(t, e.url(), tok, 1)
	if driver.lost != 0 || !bytes.Equal(driver.sum.Sum(nil), sha(seqLines(n))) {
		t.Fatalf("driver: %d bytes, lost %d (%v)", driver.got, driver.lost, driver.causes)
	}
	stop()
	if err := <-viewerDone; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	viewer.pace = nil
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if done, err := viewer.follow(ctx, e.url(), tok, true); !done || err != nil {
		t.Fatalf("the viewer did not reach the exit: %v", err)
	}
	if viewer.got+viewer.lost != uint64(len(seqLines(n))) || len(viewer.causes) == 0 || viewer.causes[0] != wire.LossReadOnly {
		t.Fatalf("viewer: got %d + lost %d of %d, causes %v; want read_only", viewer.got, viewer.lost, len(seqLines(n)), viewer.causes)
	}
}

// TestFlowConfigIsChecked: a server refuses a flow it does not know and a
// hold beyond its maximum; a start is refused a flow or hold_ms out of
// bounds, and answered, not closed.
func TestFlowConfigIsChecked(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{}, nil)
	for _, cfg := range []Config{{Flow: "fast"}, {Hold: 2 * time.Hour, MaxHold: time.Hour}} {
		cfg.Supervisor, cfg.Auth, cfg.WorkspaceRoot = e.sup, e.authn, t.TempDir()
		if _, err := NewServer(cfg); err == nil {
			t.Errorf("flow %q, hold %v, max hold %v accepted", cfg.Flow, cfg.Hold, cfg.MaxHold)
		}
	}
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	for i, r := range []wire.Request{{Flow: "fast"}, {HoldMS: -1}, {HoldMS: (2 * DefaultMaxHold).Milliseconds()}} {
		r.Type, r.Req = wire.TypeStart, fmt.Sprint(i)
		c.send(t, r)
		if m, _ := c.expect(t, wire.MsgError); m.Error != wire.CodeInvalidSpec {
			t.Errorf("start %+v: %+v, want invalid_spec", r, m)
		}
	}
}
