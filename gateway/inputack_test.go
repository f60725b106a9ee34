package gateway

import (
	"bytes"
	"context"
	"io"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// stuckLauncher starts fake processes whose stdin takes nothing until
// release is called: a program that does not read its input.
type stuckLauncher struct {
	sessiontest.Launcher
	released chan struct{}
	once     sync.Once
	mu       sync.Mutex
	got      bytes.Buffer // every byte the programs read, once released
}

func newStuckLauncher() *stuckLauncher {
	return &stuckLauncher{Launcher: sessiontest.Launcher{Script: sessiontest.UntilStopped}, released: make(chan struct{})}
}

func (l *stuckLauncher) Start(ctx context.Context, pol sandbox.Policy, stdio sandbox.Stdio) (session.Process, error) {
	p, err := l.Launcher.Start(ctx, pol, stdio)
	if err != nil {
		return nil, err
	}
	return stuckProc{Process: p, l: l}, nil
}

// release lets the programs read; later input is taken at once.
func (l *stuckLauncher) release() { l.once.Do(func() { close(l.released) }) }

func (l *stuckLauncher) input() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.got.Bytes())
}

type stuckProc struct {
	session.Process
	l *stuckLauncher
}

func (p stuckProc) Stdin() io.WriteCloser { return stuckStdin{p.l} }

type stuckStdin struct{ l *stuckLauncher }

func (w stuckStdin) Write(b []byte) (int, error) {
	<-w.l.released
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	return w.l.got.Write(b)
}

func (stuckStdin) Close() error { return nil }

// newStuckEnv is a gateway whose programs do not read input until the
// test releases them (at the latest when it ends).
func newStuckEnv(t *testing.T, tweak func(*Config)) (*testEnv, *stuckLauncher) {
	t.Helper()
	l := newStuckLauncher()
	e := newEnvOn(t, l, tweak)
	t.Cleanup(l.release) // before the supervisor closes: its input writers return
	return e, l
}

// startAttached starts a pipe execution named id and attaches to it,
// acknowledging when ack is set; it returns the channel.
func startAttached(t *testing.T, c *client, id string, ack bool) uint32 {
	t.Helper()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: id, Command: "/bin/sh", Attach: true, Ack: ack})
	att, _ := c.expect(t, wire.MsgAttached)
	return att.Channel
}

// readUntilInputAck reads until an input-ack on channel whose input_end
// reaches end, and returns it with every error and input-ack seen.
func (c *client) readUntilInputAck(t *testing.T, channel uint32, end uint64) (last wire.Message, errs, acks []wire.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		f, err := c.read(ctx)
		if err != nil {
			t.Fatalf("waiting for input-ack to %d: %v (errors %+v, input-acks %+v)", end, err, errs, acks)
		}
		switch {
		case f.msg == nil:
		case f.msg.Type == wire.MsgError:
			errs = append(errs, *f.msg)
		case f.msg.Type == wire.MsgInputAck:
			acks = append(acks, *f.msg)
			if f.msg.Channel == channel && f.msg.InputEnd >= end {
				return *f.msg, errs, acks
			}
		}
	}
}

// TestInputAckReportsEachFrame: on an idle acknowledging channel every
// frame is answered: accepted input with its offset, a refused frame with
// why, never with an error message.
func TestInputAckReportsEachFrame(t *testing.T) {
	t.Parallel()
	e, l := newStuckEnv(t, nil)
	l.release()
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	ch := startAttached(t, c, "typed", true)
	for _, step := range []struct {
		offset    uint64
		data      string
		x, end    uint64
		errorCode string
	}{
		{0, "abc", 3, 3, ""},
		{3, "de", 5, 5, ""},
		{1, "bcd", 5, 4, ""}, // a retransmit below what was received
		{7, "x", 5, 8, wire.CodeInputOffset},
		{5, "fg", 7, 7, ""},
		{7, "", 7, 7, ""}, // an empty frame asks for the offset
	} {
		c.sendInput(t, ch, step.offset, step.data)
		m, errs, _ := c.readUntilInputAck(t, ch, step.end)
		if m.InputOffset != step.x || m.InputEnd != step.end || m.Error != step.errorCode || len(errs) > 0 {
			t.Fatalf("frame %d+%q: input-ack %+v, errors %+v; want offset %d end %d error %q", step.offset, step.data, m, errs, step.x, step.end, step.errorCode)
		}
		if step.errorCode != "" && m.Message == "" {
			t.Errorf("refusal without a message: %+v", m)
		}
	}
	c.send(t, wire.Request{Type: wire.TypeCancel, Req: "c", Channel: ch})
	c.expect(t, wire.MsgOK)
}

// TestInputAckRefusalsAreNeverSilent: a program that does not read makes
// its input buffer refuse frames; the input-ack says which were refused
// and why, so the client resends from input_offset and nothing is lost.
func TestInputAckRefusalsAreNeverSilent(t *testing.T) {
	t.Parallel()
	e, l := newStuckEnv(t, nil)
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	ch := startAttached(t, c, "paste", true)
	const frames = 8
	paste := numbered(0, frames*wire.MaxInputFrameBytes)
	for i := range frames {
		off := i * wire.MaxInputFrameBytes
		c.sendInput(t, ch, uint64(off), string(paste[off:off+wire.MaxInputFrameBytes]))
	}
	m, errs, acks := c.readUntilInputAck(t, ch, uint64(len(paste)))
	// The buffer takes 64 KiB (the frame the program is stuck reading
	// included); the rest is refused: the first refused frame as
	// input_full, those after it as input_offset (they start beyond what
	// was received), and the input-ack names the newest refusal.
	held := uint64(session.DefaultInputBuffer)
	if m.InputOffset != held || m.InputEnd != uint64(len(paste)) || !wire.InputRefused(m.Error) || m.Message == "" || len(errs) > 0 {
		t.Fatalf("after the paste: input-ack %+v, errors %+v", m, errs)
	}
	if len(acks) > frames {
		t.Errorf("%d input-acks for %d frames", len(acks), frames)
	}
	l.release()
	for x := m.InputOffset; x < uint64(len(paste)); {
		time.Sleep(20 * time.Millisecond) // the pause before a resend
		end := min(x+wire.MaxInputFrameBytes, uint64(len(paste)))
		c.sendInput(t, ch, x, string(paste[x:end]))
		m, errs, _ = c.readUntilInputAck(t, ch, end)
		if len(errs) > 0 {
			t.Fatalf("resend: errors %+v", errs)
		}
		x = m.InputOffset
	}
	deadline := time.Now().Add(30 * time.Second)
	for !bytes.Equal(l.input(), paste) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := l.input(); !bytes.Equal(got, paste) {
		t.Fatalf("the program read %d bytes, want the %d pasted", len(got), len(paste))
	}
	c.send(t, wire.Request{Type: wire.TypeCancel, Req: "c", Channel: ch})
	c.expect(t, wire.MsgOK)
}

// TestInputAckReportsRateLimits: frames over the subject's input rate are
// reported through the input-ack too.
func TestInputAckReportsRateLimits(t *testing.T) {
	t.Parallel()
	e, l := newStuckEnv(t, func(c *Config) { c.InputPerSecond, c.InputBurst = 1, 1 })
	l.release()
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	ch := startAttached(t, c, "fast", true)
	for i := range 6 {
		c.sendInput(t, ch, uint64(i), "x")
	}
	m, errs, _ := c.readUntilInputAck(t, ch, 6)
	if m.InputOffset != 1 || m.Error != wire.CodeRateLimited || len(errs) > 0 {
		t.Fatalf("input-ack %+v, errors %+v", m, errs)
	}
	c.send(t, wire.Request{Type: wire.TypeCancel, Req: "c", Channel: ch})
	c.expect(t, wire.MsgOK)
}

// TestInputWithoutAckKeepsTheOldRules: a client that does not acknowledge
// gets no input-ack, and one error for the first refused frame of a burst.
func TestInputWithoutAckKeepsTheOldRules(t *testing.T) {
	t.Parallel()
	e, _ := newStuckEnv(t, nil)
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	ch := startAttached(t, c, "old", false)
	for i := range 8 {
		c.sendInput(t, ch, uint64(i*wire.MaxInputFrameBytes), string(numbered(0, wire.MaxInputFrameBytes)))
	}
	c.send(t, wire.Request{Type: wire.TypePing, Req: "p"})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var errs []wire.Message
	for {
		f, err := c.read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if f.msg != nil && f.msg.Type == wire.MsgInputAck {
			t.Fatalf("input-ack on a channel without ack: %+v", f.msg)
		}
		if f.msg != nil && f.msg.Type == wire.MsgError {
			errs = append(errs, *f.msg)
		}
		if f.msg != nil && f.msg.Type == wire.MsgPong {
			break
		}
	}
	held := uint64(session.DefaultInputBuffer)
	if len(errs) != 1 || errs[0].Error != wire.CodeInputFull || errs[0].Channel != ch || errs[0].InputOffset != held {
		t.Fatalf("errors for 3 refused frames: %+v", errs)
	}
	c.send(t, wire.Request{Type: wire.TypeCancel, Req: "c", Channel: ch})
	c.expect(t, wire.MsgOK)
}

// numbered returns n bytes that tell their offsets apart, from offset from.
func numbered(from, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((from + i) % 251)
	}
	return b
}

// TestInputAcksCoalesce: input-acks waiting for the writer merge into one
// per channel, offsets as maxima, the newest refusal kept until the
// received offset covers every frame.
func TestInputAcksCoalesce(t *testing.T) {
	t.Parallel()
	a := inputAcks{pending: map[uint32]*wire.Message{}}
	a.add(1, 3, 3, "", "")
	a.add(1, 3, 8, wire.CodeInputFull, "full")
	a.add(2, 0, 5, wire.CodeRateLimited, "slow")
	a.add(1, 5, 5, "", "")
	a.add(3, 0, 4, wire.CodeInputFull, "full")
	a.add(3, 4, 4, "", "")
	want := []wire.Message{
		{Type: wire.MsgInputAck, Channel: 1, InputOffset: 5, InputEnd: 8, Error: wire.CodeInputFull, Message: "full"},
		{Type: wire.MsgInputAck, Channel: 2, InputOffset: 0, InputEnd: 5, Error: wire.CodeRateLimited, Message: "slow"},
		{Type: wire.MsgInputAck, Channel: 3, InputOffset: 4, InputEnd: 4},
	}
	if got := a.take(); !reflect.DeepEqual(got, want) {
		t.Fatalf("took %+v\nwant %+v", got, want)
	}
	if got := a.take(); len(got) != 0 {
		t.Fatalf("took again %+v", got)
	}
	a.add(1, 9, 9, "", "")
	if got := a.take(); len(got) != 1 || got[0].InputOffset != 9 || got[0].InputEnd != 9 || got[0].Error != "" {
		t.Fatalf("after a take: %+v", got)
	}
}

// TestReadOnlyAckGetsNoInputAck: ack on a read-only channel does not make
// it an acknowledging writer: input is refused as before, with an error.
func TestReadOnlyAckGetsNoInputAck(t *testing.T) {
	t.Parallel()
	e, l := newStuckEnv(t, nil)
	l.release()
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	ch := startAttached(t, c, "viewed", true)
	c.send(t, wire.Request{Type: wire.TypeAttach, ID: "viewed", ReadOnly: true, Ack: true})
	ro, _ := c.expect(t, wire.MsgAttached)
	c.sendInput(t, ro.Channel, 0, "x")
	if m := c.expectAny(t, wire.MsgError, wire.MsgInputAck); m.Type != wire.MsgError || m.Error != wire.CodeReadOnly {
		t.Fatalf("input on a read-only channel attached with ack: %+v", m)
	}
	c.send(t, wire.Request{Type: wire.TypeCancel, Req: "c", Channel: ch})
	c.expect(t, wire.MsgOK)
}

// TestInputAckWaitsForTheNextWrite: an accepted frame's input-ack waits
// for the connection's next write (a keystroke's echo, usually) instead
// of being written on its own, and goes with it; a refusal goes at once.
func TestInputAckWaitsForTheNextWrite(t *testing.T) {
	t.Parallel()
	e, l := newStuckEnv(t, func(c *Config) { c.inputAckDelay = time.Hour })
	l.release()
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	ch := startAttached(t, c, "quiet", true) // prints nothing
	ctx, cancel := context.WithCancel(t.Context())
	msgs := make(chan wire.Message, 16)
	go func() {
		defer close(msgs)
		for {
			f, err := c.read(ctx)
			if err != nil {
				return
			}
			if f.msg != nil && (f.msg.Type == wire.MsgInputAck || f.msg.Type == wire.MsgError) {
				msgs <- *f.msg
			}
		}
	}()
	defer func() {
		cancel()
		for range msgs {
		}
	}()
	next := func(what string) wire.Message {
		t.Helper()
		select {
		case m := <-msgs:
			return m
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s", what)
			return wire.Message{}
		}
	}
	// Let the channel's first batch (its started event) be written: an
	// ack accepted while a write is under way goes with that write.
	time.Sleep(200 * time.Millisecond)
	c.sendInput(t, ch, 0, "ab")
	select {
	case m := <-msgs:
		t.Fatalf("%+v written on its own, before anything else was", m)
	case <-time.After(300 * time.Millisecond):
	}
	c.send(t, wire.Request{Type: wire.TypeDetach, Req: "d", Channel: ch + 1})
	if m := next("answer"); m.Type != wire.MsgError || m.Req != "d" {
		t.Fatalf("got %+v, want the detach's error", m)
	}
	if m := next("input-ack"); m.Type != wire.MsgInputAck || m.InputOffset != 2 || m.InputEnd != 2 {
		t.Fatalf("got %+v, want the input-ack of 2 bytes with the answer", m)
	}
	c.sendInput(t, ch, 5, "x")
	if m := next("refusal"); m.Type != wire.MsgInputAck || m.Error != wire.CodeInputOffset || m.InputEnd != 6 {
		t.Fatalf("got %+v, want the input_offset refusal at once", m)
	}
}

// TestInputAckTimerEndsWithTheConnection: however arming, taking and the
// hold timer's firing interleave, stopInputAcks returns; a leaked count
// once kept a closed connection's teardown, and the ring holds of its
// channels, waiting forever.
func TestInputAckTimerEndsWithTheConnection(t *testing.T) {
	t.Parallel()
	c := &conn{s: &Server{cfg: Config{inputAckDelay: time.Microsecond}}}
	w := &c.w
	w.c, w.flushersDone, w.inputAcks.pending = c, true, map[uint32]*wire.Message{}
	deadline := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for i := 0; i < 200_000 && time.Now().Before(deadline); i++ {
				w.holdInputAck()
				if i%3 == 0 {
					w.inputAcks.take()
				}
			}
		})
	}
	wg.Wait()
	stopped := make(chan struct{})
	go func() { w.stopInputAcks(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("stopInputAcks still waits for a hold timer 10 s after the last arming")
	}
}
