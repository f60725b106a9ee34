package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

// FuzzRing runs a random sequence of appends, reads and cursor reads on a
// small ring and checks every result against model, which keeps every
// event ever appended and recomputes what the bounds retain.
func FuzzRing(f *testing.F) {
	f.Add([]byte{10, 3, 0, 1, 5, 0, 2, 9, 6, 0, 1, 0})
	f.Add([]byte{0, 0, 0, 1, 200, 1, 2, 3, 3, 1, 1, 4, 2, 5, 6, 0, 0, 0})
	f.Add([]byte{63, 15, 7, 0, 7, 0, 0, 2, 40, 7, 1, 7, 1, 5, 7, 1, 7, 1})
	f.Add(bytes.Repeat([]byte{0, 1, 30, 6, 2, 3, 4, 7, 0, 3}, 20))
	// Cursors only: a lent batch, then enough output to evict it.
	f.Add(append([]byte{63, 15, 1, 6, 0, 0, 1, 10, 0, 1, 10, 0, 1, 10, 7, 0}, bytes.Repeat([]byte{0, 2, 50}, 20)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &fuzzInput{data: data}
		cfg := Config{MaxBytes: 1 + int(in.byte()%64), MaxEvents: 1 + int(in.byte()%16)}
		// Read pins the slabs it returns, which would hide mistakes in the
		// cursors' leases, so some runs use cursors only.
		h := &harness{t: t, ring: New(cfg), model: model{cfg: cfg, cum: []uint64{0}}, reads: in.byte()%2 == 0}
		for !in.done() {
			h.step(in)
			h.checkState()
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

// model is the obvious implementation: all events ever appended, and the
// retained ones recomputed from the bounds each time.
type model struct {
	cfg     Config
	all     []Event
	cum     []uint64 // cum[i]: output bytes in all[:i], so sums stay O(1)
	offsets [StreamStderr + 1]uint64
	closed  bool
}

func (m *model) last() uint64 { return uint64(len(m.all)) }

// first is the first event of the longest suffix within both bounds, or the
// last event alone when it exceeds MaxBytes by itself.
func (m *model) first() uint64 {
	n, size := 0, 0
	for i := len(m.all) - 1; i >= 0; i-- {
		size += len(m.all[i].Data)
		if n > 0 && (n+1 > m.cfg.MaxEvents || size > m.cfg.MaxBytes) {
			break
		}
		n++
	}
	return m.last() - uint64(n) + 1
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
	return ev.Seq, nil
}

// read returns what Read returns, with the exact Bytes of a gap.
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
	c     *Cursor
	exact bool    // whether the cursor knows the output before its position
	lent  []Event // the last batch, whose Data must hold until the next call
}

type harness struct {
	t       *testing.T
	ring    *Ring
	model   model
	cursors []fuzzCursor
	kept    [][]Event // results of Read, whose Data must hold forever
	reads   bool      // whether Read is used at all
}

func (h *harness) step(in *fuzzInput) {
	switch op := in.byte() % 8; op {
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
			h.newCursor(uint64(in.byte()) % (h.model.last() + 3))
			return
		}
		after := uint64(in.byte()) % (h.model.last() + 3)
		h.read(after, int(in.byte()%6)-1, int(in.byte()%100)-1)
	case 6:
		h.newCursor(uint64(in.byte()) % (h.model.last() + 3))
	case 7:
		if len(h.cursors) > 0 {
			h.next(&h.cursors[int(in.byte())%len(h.cursors)])
		}
	}
}

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
		wantGap.Bytes = h.model.outputBytes(1, wantGap.To)
	}
	where := fmt.Sprintf("read after %d max %d maxBytes %d", after, max, maxBytes)
	h.compare(where, got, gap, want, wantGap)
	if len(h.kept) < 8 {
		h.kept = append(h.kept, got)
	}
}

func (h *harness) newCursor(after uint64) {
	if len(h.cursors) == 4 {
		return
	}
	exact := after <= h.model.last() && (after == 0 || after+1 >= h.model.first())
	h.cursors = append(h.cursors, fuzzCursor{c: h.ring.Cursor(after), exact: exact})
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
	if gap != nil && wantGap != nil && !c.exact {
		// Before its first gap an inexact cursor over-counts, never under.
		if gap.Bytes < wantGap.Bytes || gap.Bytes > h.model.outputBytes(1, wantGap.To) {
			h.t.Fatalf("%s: gap bytes %d, want between %d and all evicted", where, gap.Bytes, wantGap.Bytes)
		}
		wantGap.Bytes = gap.Bytes
	}
	h.compare(where, got, gap, want, wantGap)
	if gap != nil {
		c.exact = true
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
	if m.last() > 0 {
		want.EvictedBytes = m.outputBytes(1, m.first())
		want.Events = int(m.last() - m.first() + 1)
	}
	want.Bytes = int(want.OutputBytes - want.EvictedBytes)
	if st := h.ring.Stats(); st != want {
		h.t.Fatalf("stats %+v, want %+v", st, want)
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
