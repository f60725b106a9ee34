package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/gatewaytest"
	"github.com/termgate/termgate/gateway/wire"
)

// scripted dials a scripted server whose first connection opens with
// hello (none for a zero Message) and returns the client and that
// connection.
func scripted(t *testing.T, hello wire.Message) (*client.Client, *gatewaytest.Scripted, *gatewaytest.ScriptConn) {
	t.Helper()
	s := gatewaytest.NewScripted(t)
	dialed := make(chan error, 1)
	var c *client.Client
	go func() {
		var err error
		c, err = client.Dial(t.Context(), client.Config{URL: s.URL, Token: func(context.Context) (string, error) { return "t", nil },
			MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
		dialed <- err
	}()
	conn := s.Accept(t)
	conn.Handshake(t, hello)
	if err := <-dialed; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, s, conn
}

// attachJob attaches to "job" on conn, answered with attached as given
// on channel 1, and returns the execution and the attach request.
func attachJob(t *testing.T, c *client.Client, conn *gatewaytest.ScriptConn, attached wire.Message) (*client.Execution, wire.Request) {
	t.Helper()
	type result struct {
		e   *client.Execution
		err error
	}
	done := make(chan result, 1)
	go func() {
		e, err := c.Attach(t.Context(), "job", 0, false)
		done <- result{e, err}
	}()
	req := conn.Request(t, wire.TypeAttach)
	conn.Attached(t, req, 1, attached)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.e, req
}

// reconnect cuts conn and returns the next connection, after its
// handshake, and the attach the client sent on it.
func reconnect(t *testing.T, s *gatewaytest.Scripted, conn *gatewaytest.ScriptConn) (*gatewaytest.ScriptConn, wire.Request) {
	t.Helper()
	conn.Drop()
	next := s.Accept(t)
	next.Handshake(t, gatewaytest.Hello())
	return next, next.Request(t, wire.TypeAttach)
}

func next(t *testing.T, e *client.Execution) client.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), gatewaytest.ScriptTimeout)
	defer cancel()
	ev, err := e.Next(ctx)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	return ev
}

// expectAck reads requests until an ack and returns its seq.
func expectAck(t *testing.T, conn *gatewaytest.ScriptConn) uint64 {
	t.Helper()
	r := conn.Request(t, wire.TypeAck)
	if r.Channel != 1 {
		t.Fatalf("ack on channel %d, want 1", r.Channel)
	}
	return r.Seq
}

func TestHelloIsParsed(t *testing.T) {
	t.Parallel()
	c, _, _ := scripted(t, gatewaytest.Hello())
	h := c.Server()
	if h.Server != "termgate scripted" || h.Protocol != 1 || !h.Has(wire.FeatureAck) || !h.Has(wire.FeatureInputAck) ||
		h.Limits.RingBytes != 1<<20 || h.Limits.InputFrameBytes != 16<<10 {
		t.Fatalf("hello: %+v", h)
	}
	h.Features[0] = "changed"
	if !c.Server().Has(wire.FeatureAck) {
		t.Fatal("Server returned the client's own features slice")
	}
	old, _, _ := scripted(t, wire.Message{})
	if h := old.Server(); h.Server != "" || h.Has(wire.FeatureAck) {
		t.Fatalf("a server without hello: %+v", h)
	}
}

// TestAttachCarriesAckSeenIncarnation: with a server that acknowledges,
// a reattach asks for ack and says the incarnation and the output seen
// up to after: events' data plus gaps' bytes, as replay.Cursor counts.
func TestAttachCarriesAckSeenIncarnation(t *testing.T) {
	t.Parallel()
	c, s, conn := scripted(t, gatewaytest.Hello())
	e, first := attachJob(t, c, conn, wire.Message{Ack: true, Incarnation: "i1", Flow: wire.FlowHold})
	if !first.Ack || first.After != 0 || first.Seen != 0 || first.Incarnation != "" {
		t.Fatalf("first attach: %+v", first)
	}
	conn.SendOutput(t, 1, 1, 2, 0, []byte("abc"))
	conn.Send(t, wire.Message{Type: wire.MsgGap, Channel: 1, From: 2, To: 5, Bytes: 10, Cause: wire.LossHoldExpired})
	conn.SendOutput(t, 1, 5, 2, 13, []byte("de"))
	next(t, e)
	gap := next(t, e)
	if gap.Gap == nil || *gap.Gap != (client.Gap{From: 2, To: 5, Bytes: 10, Cause: wire.LossHoldExpired}) {
		t.Fatalf("gap event: %+v", gap)
	}
	next(t, e)
	_, again := reconnect(t, s, conn)
	if !again.Ack || again.After != 5 || again.Seen != 15 || again.Incarnation != "i1" {
		t.Fatalf("reattach: ack %v, after %d, seen %d, incarnation %q; want true, 5, 15, i1", again.Ack, again.After, again.Seen, again.Incarnation)
	}
}

// TestAttachWithoutSeenWhenUnknown: an attach after a sequence the client
// did not count from says no seen (the server's gap is then inexact).
func TestAttachWithoutSeenWhenUnknown(t *testing.T) {
	t.Parallel()
	c, s, conn := scripted(t, gatewaytest.Hello())
	done := make(chan error, 1)
	go func() {
		_, err := c.Attach(t.Context(), "job", 7, false)
		done <- err
	}()
	req := conn.Request(t, wire.TypeAttach)
	conn.Attached(t, req, 1, wire.Message{Ack: true, Incarnation: "i1"})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	conn.SendOutput(t, 1, 8, 2, 100, []byte("abc"))
	_, again := reconnect(t, s, conn)
	if again.After != 8 || again.Seen != 0 {
		t.Fatalf("reattach: after %d, seen %d; want 8 and no seen", again.After, again.Seen)
	}
}

// TestAcksByBytes: after 64 KiB taken from Next the ack goes at once,
// with the ack timer out of the way; less waits for the timer.
func TestAcksByBytes(t *testing.T) {
	defer client.SetAckDelay(time.Hour)()
	c, _, conn := scripted(t, gatewaytest.Hello())
	e, _ := attachJob(t, c, conn, wire.Message{Ack: true, Incarnation: "i1"})
	conn.SendOutput(t, 1, 1, 2, 0, make([]byte, 40<<10))
	conn.SendOutput(t, 1, 2, 2, 40<<10, make([]byte, 30<<10))
	conn.SendOutput(t, 1, 3, 2, 70<<10, []byte("small"))
	next(t, e)
	next(t, e)
	if seq := expectAck(t, conn); seq != 2 {
		t.Fatalf("ack of seq %d, want 2 after 70 KiB", seq)
	}
	next(t, e)
	if req, in, ok := conn.Within(t, 300*time.Millisecond); ok {
		t.Fatalf("after 5 bytes the client sent %+v %+v; want nothing until the timer", req, in)
	}
}

// TestAcksByTimer: a little output taken is acked after the timer, and
// only once; a gap taken is acked up to its end.
func TestAcksByTimer(t *testing.T) {
	t.Parallel()
	c, _, conn := scripted(t, gatewaytest.Hello())
	e, _ := attachJob(t, c, conn, wire.Message{Ack: true, Incarnation: "i1"})
	conn.SendOutput(t, 1, 1, 2, 0, []byte("a"))
	conn.SendOutput(t, 1, 2, 2, 1, []byte("b"))
	next(t, e)
	next(t, e)
	if seq := expectAck(t, conn); seq != 2 {
		// The timer may have fired between the two: then 2 follows.
		if seq != 1 || expectAck(t, conn) != 2 {
			t.Fatalf("acks did not reach seq 2")
		}
	}
	conn.Send(t, wire.Message{Type: wire.MsgGap, Channel: 1, From: 3, To: 9, Bytes: 4, Cause: wire.LossUnheld})
	next(t, e)
	if seq := expectAck(t, conn); seq != 8 {
		t.Fatalf("ack after the gap: seq %d, want 8", seq)
	}
	code := 0
	conn.Send(t, wire.Message{Type: wire.MsgExit, Channel: 1, Seq: 9, Code: &code, Reason: "exited"})
	if ev := next(t, e); ev.Exit == nil {
		t.Fatalf("want exit, got %+v", ev)
	}
	if req, _, ok := conn.Within(t, 200*time.Millisecond); ok && req != nil && req.Type == wire.TypeAck {
		t.Fatalf("the exit was acked: %+v", req)
	}
}

// TestIncarnationChangeResets: a reattach answered with another
// incarnation (the ID was reused) is followed from its first event.
func TestIncarnationChangeResets(t *testing.T) {
	t.Parallel()
	c, s, conn := scripted(t, gatewaytest.Hello())
	e, _ := attachJob(t, c, conn, wire.Message{Ack: true, Incarnation: "i1"})
	conn.SendOutput(t, 1, 1, 2, 0, []byte("old"))
	conn.SendOutput(t, 1, 2, 2, 3, []byte("old2"))
	next(t, e)
	next(t, e)
	conn, again := reconnect(t, s, conn)
	if again.Incarnation != "i1" || again.After != 2 {
		t.Fatalf("reattach: %+v", again)
	}
	conn.Attached(t, again, 1, wire.Message{Ack: true, Incarnation: "i2"})
	conn.SendOutput(t, 1, 1, 2, 0, []byte("new"))
	if ev := next(t, e); string(ev.Data) != "new" || ev.Seq != 1 {
		t.Fatalf("after the new incarnation: %+v", ev)
	}
	if e.Incarnation() != "i2" {
		t.Fatalf("incarnation %q", e.Incarnation())
	}
	_, third := reconnect(t, s, conn)
	if third.Incarnation != "i2" || third.After != 1 || third.Seen != 3 {
		t.Fatalf("third attach: incarnation %q, after %d, seen %d; want i2, 1, 3", third.Incarnation, third.After, third.Seen)
	}
}

// readInput reads input frames until the bytes up to end were sent and
// returns what was sent from offset from on, checking frames follow on.
func readInput(t *testing.T, conn *gatewaytest.ScriptConn, from, end uint64) []byte {
	t.Helper()
	var got []byte
	for at := from; at < end; {
		in := conn.Input(t)
		if in.Offset != at {
			t.Fatalf("input frame at offset %d, want %d", in.Offset, at)
		}
		got = append(got, in.Data...)
		at += uint64(len(in.Data))
	}
	return got
}

// TestInputKeptUntilInputAck: with input-ack, Write waits while 1 MiB is
// kept unacknowledged, continues when an input-ack frees some, and a
// reconnect resends everything the server lacks, however much was sent.
func TestInputKeptUntilInputAck(t *testing.T) {
	t.Parallel()
	c, s, conn := scripted(t, gatewaytest.Hello())
	e, _ := attachJob(t, c, conn, wire.Message{Ack: true, Incarnation: "i1"})
	data := make([]byte, 1<<20+10)
	for i := range data {
		data[i] = byte(i*7 + i/251)
	}
	if n, err := e.Write(data[:1<<20]); n != 1<<20 || err != nil {
		t.Fatalf("write of 1 MiB: %d, %v", n, err)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := e.Write(data[1<<20:])
		wrote <- err
	}()
	if got := readInput(t, conn, 0, 1<<20); !bytes.Equal(got, data[:1<<20]) {
		t.Fatal("the first MiB arrived changed")
	}
	select {
	case err := <-wrote:
		t.Fatalf("a write past the 1 MiB kept returned (%v) before any input-ack", err)
	case <-time.After(200 * time.Millisecond):
	}
	conn.Send(t, wire.Message{Type: wire.MsgInputAck, Channel: 1, InputOffset: 16 << 10, InputEnd: 16 << 10})
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if got := readInput(t, conn, 1<<20, 1<<20+10); !bytes.Equal(got, data[1<<20:]) {
		t.Fatal("the last 10 bytes arrived changed")
	}
	conn, again := reconnect(t, s, conn)
	conn.Attached(t, again, 1, wire.Message{Ack: true, Incarnation: "i1", InputOffset: 16 << 10})
	if got := readInput(t, conn, 16<<10, uint64(len(data))); !bytes.Equal(got, data[16<<10:]) {
		t.Fatal("the resent input differs")
	}
}

// TestInputResentAfterRefusal: an input-ack whose input_end is beyond
// its input_offset makes the client resend from input_offset.
func TestInputResentAfterRefusal(t *testing.T) {
	t.Parallel()
	c, _, conn := scripted(t, gatewaytest.Hello())
	e, _ := attachJob(t, c, conn, wire.Message{Ack: true, Incarnation: "i1"})
	data := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	e.Write(data)
	readInput(t, conn, 0, uint64(len(data)))
	conn.Send(t, wire.Message{Type: wire.MsgInputAck, Channel: 1, InputOffset: 10, InputEnd: uint64(len(data)), Error: wire.CodeInputFull})
	if got := readInput(t, conn, 10, uint64(len(data))); !bytes.Equal(got, data[10:]) {
		t.Fatalf("resent %q", got)
	}
	// Refused again without progress: resent again, after a longer pause.
	conn.Send(t, wire.Message{Type: wire.MsgInputAck, Channel: 1, InputOffset: 10, InputEnd: uint64(len(data)), Error: wire.CodeInputFull})
	if got := readInput(t, conn, 10, uint64(len(data))); !bytes.Equal(got, data[10:]) {
		t.Fatalf("resent %q", got)
	}
	conn.Send(t, wire.Message{Type: wire.MsgInputAck, Channel: 1, InputOffset: uint64(len(data)), InputEnd: uint64(len(data))})
	e.Write([]byte("!"))
	if in := conn.Input(t); in.Offset != uint64(len(data)) || string(in.Data) != "!" {
		t.Fatalf("after the ack: %d %q", in.Offset, in.Data)
	}
}

// TestWithoutAckFeatures: a server that sends no hello is served as
// before: no ack fields, no acks, and refusals come as errors.
func TestWithoutAckFeatures(t *testing.T) {
	t.Parallel()
	c, _, conn := scripted(t, wire.Message{})
	e, req := attachJob(t, c, conn, wire.Message{})
	if req.Ack || req.Seen != 0 || req.Incarnation != "" {
		t.Fatalf("attach to an old server: %+v", req)
	}
	conn.SendOutput(t, 1, 1, 2, 0, []byte("out"))
	next(t, e)
	e.Write([]byte("abcdef"))
	readInput(t, conn, 0, 6)
	conn.Send(t, wire.Message{Type: wire.MsgError, Channel: 1, Error: wire.CodeInputFull, InputOffset: 2})
	for at := uint64(2); at < 6; {
		r, in := conn.Next(t)
		if r != nil {
			t.Fatalf("the client sent %+v to a server without ack", *r)
		}
		if in.Offset != at {
			t.Fatalf("resent from %d, want %d", in.Offset, at)
		}
		at += uint64(len(in.Data))
	}
	if r, _, ok := conn.Within(t, 200*time.Millisecond); ok {
		t.Fatalf("the client sent %+v", r)
	}
}

// TestWriteContextEnds: a Write waiting for room ends with its context.
func TestWriteContextEnds(t *testing.T) {
	t.Parallel()
	c, _, conn := scripted(t, gatewaytest.Hello())
	e, _ := attachJob(t, c, conn, wire.Message{Ack: true, Incarnation: "i1"})
	e.Write(make([]byte, 1<<20))
	ctx, cancel := context.WithCancelCause(t.Context())
	cause := errors.New("given up")
	go func() {
		time.Sleep(50 * time.Millisecond)
		cancel(cause)
	}()
	if n, err := e.WriteContext(ctx, []byte("x")); n != 0 || !errors.Is(err, cause) {
		t.Fatalf("write: %d, %v", n, err)
	}
	c.Close()
	if _, err := e.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("write after Close: %v", err)
	}
}

// TestReattachKeepsEachChannel: after a reconnect the server numbers the
// channels afresh, so an execution's old channel may be another's new
// one. Reattaching must not unroute the other: each execution gets its
// own output, whatever order the answers come in.
func TestReattachKeepsEachChannel(t *testing.T) {
	t.Parallel()
	c, s, conn := scripted(t, gatewaytest.Hello())
	attach := func(id string, channel uint32) *client.Execution {
		done := make(chan *client.Execution, 1)
		go func() {
			e, err := c.Attach(t.Context(), id, 0, false)
			if err != nil {
				t.Error(err)
			}
			done <- e
		}()
		conn.Attached(t, conn.Request(t, wire.TypeAttach), channel, wire.Message{Incarnation: "i-" + id, LastSeq: 1})
		return <-done
	}
	a, b := attach("a", 1), attach("b", 2)
	conn.Drop()
	next := s.Accept(t)
	next.Handshake(t, gatewaytest.Hello())
	reqs := map[string]wire.Request{}
	for range 2 {
		r := next.Request(t, wire.TypeAttach)
		reqs[r.ID] = r
	}
	// Swapped: b now has a's old channel, then a gets b's.
	next.Attached(t, reqs["b"], 1, wire.Message{Incarnation: "i-b", LastSeq: 1})
	next.Attached(t, reqs["a"], 2, wire.Message{Incarnation: "i-a", LastSeq: 1})
	next.SendOutput(t, 1, 1, 2, 0, []byte("for b"))
	next.SendOutput(t, 2, 1, 2, 0, []byte("for a"))
	for e, want := range map[*client.Execution]string{a: "for a", b: "for b"} {
		if ev := nextOutput(t, e); string(ev.Data) != want {
			t.Fatalf("%s got %q, want %q", e.ID(), ev.Data, want)
		}
	}
}

// nextOutput returns e's next output event.
func nextOutput(t *testing.T, e *client.Execution) client.Event {
	t.Helper()
	for {
		if ev := next(t, e); ev.Kind == "output" {
			return ev
		}
	}
}
