package replay

import (
	"errors"
	"io"
	"sync"
	"testing"
)

// pattern is the byte at offset o of stream s in TestConcurrentReaders, so
// that a reader can check every byte it gets, not just the counts.
func pattern(s Stream, o uint64) byte { return byte(o*7 + o>>8 + uint64(s)) }

// TestConcurrentReaders runs one writer at full speed against eight cursor
// readers on a small ring. Each reader checks that sequences are
// continuous, offsets and bytes are right per stream, and that gaps account
// exactly for what it missed.
func TestConcurrentReaders(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		const events = 20000
		r := m.new(Config{MaxBytes: 64 << 10, MaxEvents: 512})
		var wg sync.WaitGroup
		for range 8 {
			c := r.Cursor(0)
			wg.Go(func() { checkReader(t, c) })
		}
		write(t, r, events)
		wg.Wait()
	})
}

// write appends n events: output of varying size on two streams, with an
// occasional resize, then the exit.
func write(t *testing.T, r *Ring, n int) {
	var offsets [StreamStderr + 1]uint64
	buf := make([]byte, 4096)
	for i := range n {
		if i%97 == 0 {
			r.Append(Event{Kind: KindResize, Rows: 24, Cols: uint16(80 + i%50)})
			continue
		}
		s := StreamStdout + Stream(i%2)
		p := buf[:1+(i*131)%len(buf)]
		for k := range p {
			p[k] = pattern(s, offsets[s]+uint64(k))
		}
		if _, err := r.AppendOutput(s, p); err != nil {
			t.Errorf("append: %v", err)
			return
		}
		offsets[s] += uint64(len(p))
	}
	if _, err := r.Append(exitEvent(0)); err != nil {
		t.Errorf("exit: %v", err)
	}
}

// streamCheck follows one reader's view of the streams. After a gap a
// stream's offset is unknown until its next output, which must not go back.
type streamCheck struct {
	next  [StreamStderr + 1]uint64
	known [StreamStderr + 1]bool
	seen  uint64 // output bytes delivered plus bytes reported missing
}

func (sc *streamCheck) output(ev *Event) error {
	s := ev.Stream
	if (sc.known[s] && ev.Offset != sc.next[s]) || ev.Offset < sc.next[s] {
		return errors.New("offset out of order")
	}
	for k, b := range ev.Data {
		if b != pattern(s, ev.Offset+uint64(k)) {
			return errors.New("corrupted data")
		}
	}
	sc.next[s], sc.known[s] = ev.Offset+uint64(len(ev.Data)), true
	sc.seen += uint64(len(ev.Data))
	return nil
}

func (sc *streamCheck) gap(g *Gap) {
	sc.known = [StreamStderr + 1]bool{}
	sc.seen += g.Bytes
}

func checkReader(t *testing.T, c *Cursor) {
	var sc streamCheck
	var last Event
	for {
		evs, gap, err := c.Next(t.Context())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Errorf("next: %v", err)
			return
		}
		if gap != nil {
			if gap.From != last.Seq+1 || gap.To <= gap.From || c.After() != gap.To-1 {
				t.Errorf("gap %+v after seq %d", gap, last.Seq)
				return
			}
			sc.gap(gap)
			last.Seq = gap.To - 1
			continue
		}
		for i := range evs {
			ev := &evs[i]
			if ev.Seq != last.Seq+1 {
				t.Errorf("seq %d after %d", ev.Seq, last.Seq)
				return
			}
			if ev.Kind == KindOutput {
				if err := sc.output(ev); err != nil {
					t.Errorf("seq %d, %s at %d: %v", ev.Seq, ev.Stream, ev.Offset, err)
					return
				}
			}
			last = *ev
		}
	}
	st := c.ring.Stats()
	if last.Kind != KindExit || last.Seq != st.Appended {
		t.Errorf("ended at seq %d (%s), want the exit at %d", last.Seq, last.Kind, st.Appended)
	}
	if sc.seen != st.OutputBytes {
		t.Errorf("delivered plus missing bytes %d, want %d", sc.seen, st.OutputBytes)
	}
}
