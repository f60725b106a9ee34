package gateway

import (
	"sync"
	"time"

	"github.com/termgate/termgate/gateway/wire"
)

// inputAckDelay is how long an accepted frame's input-ack waits for the
// connection's next write, so that it rides with the keystroke's echo
// instead of waking a goroutine of its own: echoes take well under a
// millisecond, so this is reached only by input that prints nothing.
// Nothing waits on it: the clients send input paced 20 ms apart whatever
// the acks, an ack only frees input they keep (1 MiB of it before a
// write waits), and they resend 200 ms after a refusal, which is never
// held.
const inputAckDelay = 2 * time.Millisecond

// inputAcks are a connection's input-acks waiting for its writer: at most
// one per channel, into which a newer one is merged, so a burst of input
// frames yields few messages and what waits is bounded by the channels.
// The read loop adds and kicks the writer; the one writing takes.
type inputAcks struct {
	mu      sync.Mutex
	pending map[uint32]*wire.Message
	order   []uint32 // the channels in pending, oldest first

	// The hold timer (holdInputAck): armed while an accepted frame's ack
	// waits for output; timer is made on first use.
	timer   *time.Timer
	armed   bool
	stopped bool           // stopInputAcks was called: arm no more
	running sync.WaitGroup // one for each firing to come or under way
}

// add reports an input frame processed on channel: the input the
// execution has received and the frame's end offset; code and msg say
// why it was refused, empty when it was accepted. Offsets merge as
// maxima; the refusal kept is the newest, dropped once received covers
// every frame's end.
func (a *inputAcks) add(channel uint32, received, end uint64, code, msg string) {
	a.mu.Lock()
	m, ok := a.pending[channel]
	if !ok {
		m = &wire.Message{Type: wire.MsgInputAck, Channel: channel}
		a.pending[channel] = m
		a.order = append(a.order, channel)
	}
	m.InputOffset, m.InputEnd = max(m.InputOffset, received), max(m.InputEnd, end)
	if code != "" {
		m.Error, m.Message = code, msg
	}
	if m.InputEnd <= m.InputOffset {
		m.Error, m.Message = "", ""
	}
	a.mu.Unlock()
}

// take removes and returns the pending input-acks, oldest first; nil
// when none.
func (a *inputAcks) take() []wire.Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.disarmLocked()
	if len(a.order) == 0 {
		return nil
	}
	out := make([]wire.Message, 0, len(a.order))
	for _, ch := range a.order {
		out = append(out, *a.pending[ch])
	}
	clear(a.pending)
	a.order = a.order[:0]
	return out
}

// inputEnd is the end offset of an input frame, saturating: an offset
// that large is refused anyway.
func inputEnd(in wire.Input) uint64 {
	end := in.Offset + uint64(len(in.Data))
	if end < in.Offset {
		return ^uint64(0)
	}
	return end
}

// disarmLocked stops the hold timer: the acks are being written.
func (a *inputAcks) disarmLocked() {
	if a.armed && a.timer.Stop() {
		a.running.Done() // it will not fire
	}
	a.armed = false
}
