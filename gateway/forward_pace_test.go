package gateway

import (
	"testing"
	"time"
)

// TestPace: a stream's limit shrinks while its round trips queue past
// paceTarget, to paceMin at least; it grows back while they do not, to
// ForwardWindow at most; one round trip is timed at a time; and a base
// learnt on a faster path is forgotten within two periods.
func TestPace(t *testing.T) {
	t.Parallel()
	now := time.Unix(1e9, 0)
	const frame = 64 << 10
	p := newPace()
	var sent uint64
	shared := true
	// round sends frames of the limit and has them acknowledged rtt after
	// the first was written; it returns the limit after.
	round := func(rtt time.Duration) int {
		start := now
		for range p.limit / frame {
			sent += frame
			p.written(sent, now)
			now = now.Add(time.Microsecond)
		}
		now = start.Add(rtt)
		p.acknowledged(uint64(p.limit/frame*frame), now, shared)
		return p.limit
	}
	if got := round(100 * time.Microsecond); got != ForwardWindow {
		t.Fatalf("a round trip without a queue left the limit at %d, want ForwardWindow %d", got, ForwardWindow)
	}
	last := p.limit
	for i := range 20 {
		got := round(100*time.Microsecond + 3*paceTarget)
		if got < paceMin || (got >= last && last > paceMin) {
			t.Fatalf("round %d queued 3 ms: limit %d after %d, want it to shrink, to %d at least", i, got, last, paceMin)
		}
		last = got
	}
	if last != paceMin {
		t.Fatalf("after 20 rounds that queued 3 ms the limit is %d, want paceMin %d", last, paceMin)
	}
	// At the target, it holds.
	if got := round(100*time.Microsecond + paceTarget); got != paceMin {
		t.Errorf("a round at the target moved the limit to %d", got)
	}
	for i := range 20 {
		got := round(100 * time.Microsecond)
		if got > ForwardWindow || (got <= last && last < ForwardWindow) {
			t.Fatalf("round %d without a queue: limit %d after %d, want it to grow, to ForwardWindow at most", i, got, last)
		}
		last = got
	}
	if last != ForwardWindow {
		t.Fatalf("after 20 rounds without a queue the limit is %d, want ForwardWindow", last)
	}
	// The path gets slower for good: 5 ms round trips shrink the limit
	// until the 100 µs base is forgotten, then it grows back.
	var shrank bool
	for range 2*paceBaseFor/(5*time.Millisecond) + 40 {
		before := p.limit
		round(5 * time.Millisecond)
		shrank = shrank || p.limit < before
	}
	if !shrank || p.limit != ForwardWindow {
		t.Errorf("a path slower for good: shrank %v, limit %d after two periods; want it shrunk, then back to ForwardWindow", shrank, p.limit)
	}
	// Alone on its connection, a stream keeps the whole window, however
	// its round trips queue.
	for range 20 {
		round(5*time.Millisecond + 3*5*time.Millisecond/4) // the base is 5 ms now, the target a quarter of it
	}
	if p.limit != paceMin {
		t.Fatalf("queued again: limit %d, want paceMin", p.limit)
	}
	shared = false
	for range 20 {
		round(5*time.Millisecond + 3*5*time.Millisecond/4) // the base is 5 ms now, the target a quarter of it
	}
	if p.limit != ForwardWindow {
		t.Errorf("a stream alone on its connection, its round trips queued 3 ms: limit %d, want ForwardWindow", p.limit)
	}
}

// TestPaceTimesOneRoundTripAtATime: a frame written while a round trip
// is timed does not restart it, and credit short of the timed frame
// ends nothing.
func TestPaceTimesOneRoundTripAtATime(t *testing.T) {
	t.Parallel()
	now := time.Unix(1e9, 0)
	p := newPace()
	p.written(100, now)
	p.written(200, now.Add(5*time.Millisecond))
	p.acknowledged(50, now.Add(6*time.Millisecond), true)
	if p.probe != 100 || !p.probeAt.Equal(now) {
		t.Fatalf("the timed round trip is the frame ending at %d written %v, want 100 at %v", p.probe, p.probeAt, now)
	}
	p.acknowledged(150, now.Add(100*time.Microsecond+5*time.Millisecond), true)
	if p.probe != 0 || p.base != 100*time.Microsecond+5*time.Millisecond {
		t.Errorf("after the credit that covers it: probe %d, base %v", p.probe, p.base)
	}
}

// TestPaceKeepsTheWindowOnALongPath: on a path of 50 ms round trips
// whose jitter is a few ms, a stream beside a terminal keeps the whole
// window: jitter is no queue.
func TestPaceKeepsTheWindowOnALongPath(t *testing.T) {
	t.Parallel()
	now := time.Unix(1e9, 0)
	p := newPace()
	var sent uint64
	for i := range 200 {
		sent += ForwardWindow
		p.written(sent, now)
		now = now.Add(50*time.Millisecond + time.Duration(i%5)*time.Millisecond)
		p.acknowledged(ForwardWindow, now, true)
	}
	if p.limit != ForwardWindow {
		t.Errorf("50 ms round trips with up to 4 ms of jitter: limit %d, want ForwardWindow", p.limit)
	}
}
