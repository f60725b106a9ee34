package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"testing"
	"time"
)

// FuzzRing runs a random sequence of appends, reads, cursor reads and hold
// operations (create, ack, release, unpin) on a small ring and checks
// every result against model, which keeps every event ever appended and
// evicts as the bounds and the holds allow.
func FuzzRing(f *testing.F) {
	f.Add([]byte{10, 3, 0, 1, 5, 0, 2, 9, 6, 0, 1, 0})
	f.Add([]byte{0, 0, 0, 1, 200, 1, 2, 3, 3, 1, 1, 4, 2, 5, 6, 0, 0, 0})
	f.Add([]byte{63, 15, 7, 0, 7, 0, 0, 2, 40, 7, 1, 7, 1, 5, 7, 1, 7, 1})
	f.Add(bytes.Repeat([]byte{0, 1, 30, 6, 2, 3, 4, 7, 0, 3}, 20))
	// Cursors only: a lent batch, then enough output to evict it.
	f.Add(append([]byte{63, 15, 1, 6, 0, 0, 1, 10, 0, 1, 10, 0, 1, 10, 7, 0}, bytes.Repeat([]byte{0, 2, 50}, 20)...))
	// Holds: a hold at 0 fills the ring past its bounds, WaitRoom, acks,
	// a second hold, release, a cursor that counted, Unpin.
	f.Add(slices.Concat([]byte{9, 3, 0, 8, 0}, bytes.Repeat([]byte{0, 1, 4}, 6),
		[]byte{11, 1, 9, 0, 3, 8, 2, 0, 1, 4, 9, 1, 7, 6, 1, 1, 7, 0, 10, 0, 0, 1, 4, 7, 0, 11, 0, 0, 1, 4, 7, 0}))
	// The hard ceiling by events, then by bytes, then an ack back to the
	// bounds; cursors from an evicted after, with and without a count.
	f.Add(slices.Concat([]byte{9, 1, 1, 8, 0}, bytes.Repeat([]byte{2, 1, 1}, 5), bytes.Repeat([]byte{0, 2, 5}, 3),
		[]byte{6, 1, 0, 6, 1, 1, 9, 0, 7, 0, 1, 1, 7, 0, 0, 7, 1, 0, 7, 1}))
	// Found by fuzzing: at the event bound, an oldest event acked exactly
	// (the hold's floor) was kept as if held.
	f.Add([]byte("\t0080010010010000010010\"00108001\x0491900000000000001\x040"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, m := range modes {
			in := &fuzzInput{data: data}
			cfg := Config{MaxBytes: 1 + int(in.byte()%64), MaxEvents: 1 + int(in.byte()%16)}
			// Read pins the slabs it returns, which would hide mistakes in the
			// cursors' leases, so some runs use cursors only.
			h := &harness{t: t, ring: m.new(cfg), model: model{cfg: cfg, cum: []uint64{0}, lo: 1}, reads: in.byte()%2 == 0}
			for !in.done() {
				h.step(in)
				h.checkState()
				if m.backed {
					checkRecovered(t, h.ring, cfg)
				}
			}
		}
	})
}

type fuzzInput struct {
	data []byte
	pos  int
}

func (in *fuzzInput) done() bool { return in.pos >= len(in.data) }

func (in *fuzzInput) byte() byte {
	if in.done() {
		return 0
	}
	in.pos++
	return in.data[in.pos-1]
}

// model is the obvious implementation: all events ever appended, the
// oldest retained one, and the holds, evicting after each append exactly
// as the bounds and the holds require.
type model struct {
	cfg      Config
	all      []Event
	cum      []uint64 // cum[i]: output bytes in all[:i], so sums stay O(1)
	offsets  [StreamStderr + 1]uint64
	closed   bool
	lo       uint64 // the oldest retained event; last+1 while empty
	holds    []modelHold
	unpinned bool
	forced   uint64 // held output bytes evicted beyond twice the bounds
}

// modelHold is what the model knows of one Hold.
type modelHold struct {
	acked    uint64
	released bool
}

func (m *model) last() uint64 { return uint64(len(m.all)) }

func (m *model) first() uint64 { return m.lo }

// floor returns the lowest acknowledged sequence of the holds, and whether
// holds restrict eviction at all.
func (m *model) floor() (floor uint64, pinned bool) {
	floor = math.MaxUint64
	for _, h := range m.holds {
		if !h.released {
			floor, pinned = min(floor, h.acked), true
		}
	}
	return floor, pinned && !m.unpinned
}

// evict drops the oldest events while the ring is beyond a bound: an
// event no hold keeps goes, a held one only beyond twice a bound. The
// newest event always stays.
func (m *model) evict() {
	floor, pinned := m.floor()
	maxEvents, maxBytes := uint64(m.cfg.MaxEvents), uint64(m.cfg.MaxBytes)
	for m.lo < m.last() {
		events, size := m.last()-m.lo+1, m.outputBytes(m.lo, m.last()+1)
		if events <= maxEvents && size <= maxBytes {
			return
		}
		held := pinned && m.lo > floor
		if held && events <= 2*maxEvents && size <= 2*maxBytes {
			return
		}
		if held {
			m.forced += uint64(len(m.all[m.lo-1].Data))
		}
		m.lo++
	}
}

// held returns the retained output bytes and events after the holds'
// floor, and whether holds restrict eviction.
func (m *model) held() (size, events uint64, pinned bool) {
	floor, pinned := m.floor()
	if !pinned {
		return 0, 0, false
	}
	from := max(floor, m.lo-1)
	return m.outputBytes(from+1, m.last()+1), m.last() - from, true
}

// full reports what Ring.Full must.
func (m *model) full() bool {
	size, events, pinned := m.held()
	return pinned && !m.closed && (size >= uint64(m.cfg.MaxBytes) || events >= uint64(m.cfg.MaxEvents))
}

// outputBytes returns the output bytes in events from up to to (exclusive).
func (m *model) outputBytes(from, to uint64) uint64 { return m.cum[to-1] - m.cum[from-1] }

// append returns the sequence and error Append must return for ev.
func (m *model) append(ev Event) (uint64, error) {
	if err := ev.check(); err != nil {
		return 0, ErrInvalid
	}
	if m.closed {
		return 0, ErrClosed
	}
	ev.Seq, ev.Offset = m.last()+1, 0
	if ev.Kind == KindOutput {
		ev.Offset = m.offsets[ev.Stream]
		m.offsets[ev.Stream] += uint64(len(ev.Data))
	}
	m.closed = ev.Kind == KindExit
	m.all = append(m.all, ev)
	m.cum = append(m.cum, m.cum[len(m.cum)-1]+uint64(len(ev.Data)))
	m.evict()
	return ev.Seq, nil
}

// read returns what Read returns, with the exact Bytes of a gap (which
// Read itself knows only for after 0).
func (m *model) read(after uint64, max, maxBytes int) ([]Event, *Gap) {
	first := m.first()
	if after >= m.last() {
		return nil, nil
	}
	if after+1 < first {
		return nil, &Gap{From: after + 1, To: first, Bytes: m.outputBytes(after+1, first)}
	}
	var evs []Event
	size := 0
	for _, ev := range m.all[after:] {
		size += len(ev.Data)
		if (max > 0 && len(evs) == max) || (maxBytes > 0 && size > maxBytes && len(evs) > 0) {
			break
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

type fuzzCursor struct {
	c *Cursor
	// seen is the output the cursor counts up to its position: exact,
	// except before the first gap of a cursor made by Cursor at an evicted
	// after (guess: it counts 0, and that gap is Inexact) or in the future
	// (it counts the output appended when it was made).
	seen   uint64
	guess  bool
	future bool
	lent   []Event // the last batch, whose Data must hold until the next call
}

type harness struct {
	t       *testing.T
	ring    *Ring
	model   model
	cursors []fuzzCursor
	holds   []*Hold   // holds[i] is model.holds[i]
	kept    [][]Event // results of Read, whose Data must hold forever
	reads   bool      // whether Read is used at all
}

func (h *harness) step(in *fuzzInput) {
	switch op := in.byte() % 12; op {
	case 0:
		s, p := Stream(in.byte()%4), h.data(in.byte())
		seq, err := h.ring.AppendOutput(s, p)
		h.checkAppend(Event{Kind: KindOutput, Stream: s, Data: p}, seq, err)
	case 1:
		h.appendEvent(Event{Kind: KindOutput, Stream: Stream(in.byte() % 4), Data: h.data(in.byte())})
	case 2:
		h.appendEvent(Event{Kind: KindResize, Rows: uint16(in.byte() % 3), Cols: uint16(in.byte() % 3)})
	case 3:
		h.appendEvent(Event{Kind: Kind(in.byte() % 8), Signal: int(in.byte()%3) - 1})
	case 4:
		h.appendEvent(exitEvent(int(in.byte())))
	case 5:
		if !h.reads {
			h.newCursor(h.after(in), false)
			return
		}
		h.read(h.after(in), int(in.byte()%6)-1, int(in.byte()%100)-1)
	case 6:
		h.newCursor(h.after(in), in.byte()%2 == 0)
	case 7:
		if len(h.cursors) > 0 {
			h.next(&h.cursors[int(in.byte())%len(h.cursors)])
		}
	case 8:
		h.newHold(h.after(in))
	case 9:
		if len(h.holds) > 0 {
			h.ack(int(in.byte())%len(h.holds), h.after(in))
		}
	case 10:
		if len(h.holds) > 0 {
			h.release(int(in.byte()) % len(h.holds))
		}
	case 11:
		if in.byte()%8 == 0 {
			h.ring.Unpin()
			h.model.unpinned = true
			return
		}
		h.waitRoom()
	}
}

// after returns a sequence for a read, a cursor, a hold or an ack: up to
// two beyond the newest.
func (h *harness) after(in *fuzzInput) uint64 { return uint64(in.byte()) % (h.model.last() + 3) }

func (h *harness) newHold(after uint64) {
	if len(h.holds) == 4 {
		return
	}
	m := &h.model
	h.holds = append(h.holds, h.ring.Hold(after))
	m.holds = append(m.holds, modelHold{acked: min(max(after, m.first()-1), m.last())})
	h.checkAcked(len(h.holds) - 1)
}

func (h *harness) ack(i int, seq uint64) {
	err := h.holds[i].Ack(seq)
	mh := &h.model.holds[i]
	switch {
	case seq > h.model.last():
		if !errors.Is(err, ErrAckAhead) {
			h.t.Fatalf("hold %d: ack %d beyond %d: %v, want ErrAckAhead", i, seq, h.model.last(), err)
		}
	case err != nil:
		h.t.Fatalf("hold %d: ack %d: %v", i, seq, err)
	case !mh.released:
		mh.acked = max(mh.acked, seq)
	}
	h.checkAcked(i)
}

func (h *harness) release(i int) {
	h.holds[i].Release()
	h.model.holds[i].released = true
}

func (h *harness) checkAcked(i int) {
	if got, want := h.holds[i].Acked(), h.model.holds[i].acked; got != want {
		h.t.Fatalf("hold %d acked %d, want %d", i, got, want)
	}
}

// waitRoom checks WaitRoom without blocking: with a done context it
// returns nil exactly when the ring is not full.
func (h *harness) waitRoom() {
	ctx, cancel := context.WithCancelCause(h.t.Context())
	cancel(errFuzzDone)
	err := h.ring.WaitRoom(ctx)
	if full := h.model.full(); (err == nil) == full || (full && !errors.Is(err, errFuzzDone)) {
		h.t.Fatalf("WaitRoom: %v, want full %v", err, full)
	}
}

var errFuzzDone = errors.New("test: done")

// data returns up to 79 bytes that differ from those of other events, so
// that reused memory shows.
func (h *harness) data(n byte) []byte {
	p := make([]byte, n%80)
	for k := range p {
		p[k] = byte(len(h.model.all)*31 + k)
	}
	return p
}

func (h *harness) appendEvent(ev Event) {
	seq, err := h.ring.Append(ev)
	h.checkAppend(ev, seq, err)
}

func (h *harness) checkAppend(ev Event, seq uint64, err error) {
	wantSeq, wantErr := h.model.append(ev)
	if seq != wantSeq || !errors.Is(err, wantErr) || (wantErr == nil) != (err == nil) {
		h.t.Fatalf("append %s: seq %d, err %v; want %d, %v", ev.Kind, seq, err, wantSeq, wantErr)
	}
}

func (h *harness) read(after uint64, max, maxBytes int) {
	got, gap := h.ring.Read(nil, after, max, maxBytes)
	want, wantGap := h.model.read(after, max, maxBytes)
	if wantGap != nil && after > 0 {
		// Read cannot know the output before an evicted after: all evicted.
		wantGap.Bytes, wantGap.Inexact = h.model.outputBytes(1, wantGap.To), true
	}
	where := fmt.Sprintf("read after %d max %d maxBytes %d", after, max, maxBytes)
	h.compare(where, got, gap, want, wantGap)
	if len(h.kept) < 8 {
		h.kept = append(h.kept, got)
	}
}

// newCursor makes a cursor with Cursor, or with CursorSeen and the
// output the model counts up to after.
func (h *harness) newCursor(after uint64, counted bool) {
	if len(h.cursors) == 4 {
		return
	}
	m := &h.model
	c := fuzzCursor{seen: m.cum[min(after, m.last())], future: after > m.last()}
	if counted {
		c.c = h.ring.CursorSeen(after, c.seen)
	} else {
		c.c = h.ring.Cursor(after)
		if after > 0 && after+1 < m.first() {
			c.seen, c.guess = 0, true
		}
	}
	h.cursors = append(h.cursors, c)
}

// next calls Next on c when it would not block.
func (h *harness) next(c *fuzzCursor) {
	after := c.c.After()
	if after >= h.model.last() && !h.model.closed {
		return
	}
	ctx, cancel := context.WithTimeout(h.t.Context(), 5*time.Second)
	defer cancel()
	got, gap, err := c.c.Next(ctx)
	want, wantGap := h.model.read(after, cursorMaxEvents, cursorMaxBytes)
	where := fmt.Sprintf("cursor next after %d", after)
	if err != nil {
		if !errors.Is(err, io.EOF) || want != nil || wantGap != nil {
			h.t.Fatalf("%s: %v; want events %v, gap %+v", where, err, seqs(want), wantGap)
		}
		return
	}
	if wantGap != nil && (c.guess || c.future) {
		// Before its first gap, a cursor that did not know its position
		// counts what it knew: nothing when after was evicted.
		all := h.model.outputBytes(1, wantGap.To)
		wantGap.Bytes, wantGap.Inexact = all-min(c.seen, all), c.guess
	}
	h.compare(where, got, gap, want, wantGap)
	if gap != nil {
		c.seen += gap.Bytes
		c.guess, c.future = false, false
	}
	for i := range got {
		c.seen += uint64(len(got[i].Data))
	}
	c.lent = got
}

// checkData checks that memory lent or given to readers was not reused.
func (h *harness) checkData() {
	check := func(evs []Event) {
		for _, ev := range evs {
			if !bytes.Equal(ev.Data, h.model.all[ev.Seq-1].Data) {
				h.t.Fatalf("seq %d: data changed to %q", ev.Seq, ev.Data)
			}
		}
	}
	for _, evs := range h.kept {
		check(evs)
	}
	for _, c := range h.cursors {
		check(c.lent)
	}
}

func (h *harness) compare(where string, got []Event, gap *Gap, want []Event, wantGap *Gap) {
	if !equalGap(gap, wantGap) || len(got) != len(want) {
		h.t.Fatalf("%s: events %v, gap %+v; want %v, %+v", where, seqs(got), gap, seqs(want), wantGap)
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Seq != w.Seq || g.Kind != w.Kind || g.Stream != w.Stream || g.Offset != w.Offset ||
			!bytes.Equal(g.Data, w.Data) || g.Rows != w.Rows || g.Cols != w.Cols || g.Signal != w.Signal ||
			(g.Exit == nil) != (w.Exit == nil) || (g.Exit != nil && *g.Exit != *w.Exit) || g.Time.IsZero() {
			h.t.Fatalf("%s: event %+v, want %+v", where, g, w)
		}
	}
}

func (h *harness) checkState() {
	h.checkData()
	m := &h.model
	var want Stats
	want.Appended = m.last()
	want.OutputBytes = m.outputBytes(1, m.last()+1)
	want.EvictedBytes = m.outputBytes(1, m.first())
	want.Events = int(m.last() - m.first() + 1)
	want.Bytes = int(want.OutputBytes - want.EvictedBytes)
	want.HeldBytes, _, _ = m.held()
	want.ForcedBytes = m.forced
	for _, mh := range m.holds {
		if !mh.released {
			want.Holds++
		}
	}
	st := h.ring.Stats()
	if st != want {
		h.t.Fatalf("stats %+v, want %+v", st, want)
	}
	// The hard ceiling: whatever holds keep, memory stays bounded.
	if st.Events > 2*m.cfg.MaxEvents || (st.Bytes > 2*m.cfg.MaxBytes && st.Events > 1) {
		h.t.Fatalf("stats %+v beyond twice the bounds %+v", st, m.cfg)
	}
	if h.ring.Full() != m.full() {
		h.t.Fatalf("Full %v, want %v (stats %+v)", h.ring.Full(), m.full(), st)
	}
	first, last := h.ring.Bounds()
	wantFirst := m.first()
	if m.last() == 0 {
		wantFirst = 0
	}
	if first != wantFirst || last != m.last() || h.ring.Closed() != m.closed {
		h.t.Fatalf("bounds %d..%d closed %v, want %d..%d closed %v", first, last, h.ring.Closed(), wantFirst, m.last(), m.closed)
	}
}
