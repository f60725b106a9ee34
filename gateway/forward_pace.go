package gateway

import "time"

// Pacing of what a stream has in flight to the client.
const (
	// paceTarget is the queueing a stream may add to its round trip,
	// or a quarter of the round trip where that is more (a path's own
	// jitter is no queue): what a terminal's output on the same
	// connection may wait behind it in the client's socket. Below it
	// the stream's limit grows, above it it shrinks, each in proportion
	// to the distance.
	paceTarget = 250 * time.Microsecond
	// paceMin is the least a stream may have in flight: half a frame.
	paceMin = 64 << 10
	// paceBaseFor is how long a least round trip counts as the base:
	// the base is the least of this period's and the last one's, so a
	// path that got slower is learnt within two periods.
	paceBaseFor = 10 * time.Second
)

// pace keeps what a stream has in flight to the client near what the
// path carries without a queue. The client's credit lets a stream have
// ForwardWindow in flight, which a link of high latency needs; on a
// short one most of it would wait in the client's socket, ahead of
// every later message of the connection, a terminal's echo too. So the
// stream times one round trip at a time (from a frame's write to the
// credit that covers it), takes the least it saw as the path's own, and
// moves its limit by the bytes acknowledged, scaled by how far the
// queueing is from paceTarget (a delay-based window, as LEDBAT's).
// The zero pace is not ready: see newPace.
type pace struct {
	limit int // bytes the stream may have in flight: paceMin to ForwardWindow

	// the round trip being timed: from the write of the frame that
	// ended at offset probe (0: none) to the credit that covers it
	probe   uint64
	probeAt time.Time

	acked, ackedAtSample uint64

	// the least round trips of this period and the last one
	base, lastBase time.Duration
	baseSince      time.Time
}

func newPace() pace { return pace{limit: ForwardWindow} }

// written notes a frame written to the client, its end at offset end of
// the stream: it starts a round trip when none is timed.
func (p *pace) written(end uint64, now time.Time) {
	if p.probe == 0 {
		p.probe, p.probeAt = end, now
	}
}

// acknowledged takes the client's credit for n bytes; the credit that
// covers the timed frame ends its round trip and moves the limit, when
// shared says the connection carries terminals: alone on it, a stream
// delays nobody, and has the whole window.
func (p *pace) acknowledged(n uint64, now time.Time, shared bool) {
	p.acked += n
	if p.probe == 0 || p.acked < p.probe {
		return
	}
	rtt := now.Sub(p.probeAt)
	p.probe = 0
	if p.baseSince.IsZero() || now.Sub(p.baseSince) > paceBaseFor {
		p.lastBase, p.base, p.baseSince = p.base, rtt, now
	}
	p.base = min(p.base, rtt)
	base := p.base
	if p.lastBase > 0 {
		base = min(base, p.lastBase)
	}
	target := max(paceTarget, base/4)
	off := max(float64(target-(rtt-base))/float64(target), -1)
	if !shared {
		off = 1
	}
	p.limit += int(off * float64(p.acked-p.ackedAtSample))
	p.limit = min(max(p.limit, paceMin), ForwardWindow)
	p.ackedAtSample = p.acked
}
