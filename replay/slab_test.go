package replay

import (
	"bytes"
	"fmt"
	"testing"
)

func TestSlabLimit(t *testing.T) {
	t.Parallel()
	tests := []struct{ maxBytes, want int }{
		{1, minSlab},
		{4096, minSlab},
		{16 << 10, 1 << 10},
		{100 << 10, 8 << 10},
		{DefaultMaxBytes, maxSlab},
		{64 << 20, maxSlab},
	}
	for _, tt := range tests {
		if got := slabLimit(tt.maxBytes); got != tt.want {
			t.Errorf("slabLimit(%d) = %d, want %d", tt.maxBytes, got, tt.want)
		}
	}
}

func TestSlabsGrowFromSmall(t *testing.T) {
	t.Parallel()
	r := New(Config{})
	var sizes []int
	for range 2000 {
		r.AppendOutput(StreamPTY, bytes.Repeat([]byte("y"), 100))
		if len(sizes) == 0 || sizes[len(sizes)-1] != cap(r.cur.buf) {
			sizes = append(sizes, cap(r.cur.buf))
		}
	}
	want := []int{256, 512, 1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10}
	if fmt.Sprint(sizes) != fmt.Sprint(want) {
		t.Errorf("slab sizes %v, want %v", sizes, want)
	}
}

func TestLargeOutputHasItsOwnMemory(t *testing.T) {
	t.Parallel()
	r := New(Config{MaxBytes: 4096}) // slabs of 256 bytes
	r.AppendOutput(StreamPTY, make([]byte, 128))
	r.AppendOutput(StreamPTY, make([]byte, 129))
	if r.slots[r.index(0)].slab == nil || r.slots[r.index(1)].slab != nil {
		t.Error("want half a slab in a slab and more in its own allocation")
	}
}

// TestSteadyStateAppendsDoNotAllocate: once slabs cycle, appending output
// allocates nothing, which is what makes the ring fast.
func TestSteadyStateAppendsDoNotAllocate(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		r := m.new(Config{MaxBytes: 64 << 10})
		p := make([]byte, 1000)
		for range 1000 {
			r.AppendOutput(StreamStdout, p)
		}
		if n := testing.AllocsPerRun(1000, func() { r.AppendOutput(StreamStdout, p) }); n != 0 {
			t.Errorf("%v allocations per append, want 0", n)
		}
	})
}

// churn appends enough numbered outputs to evict everything before them
// several times over.
func churn(r *Ring, n int) {
	for i := range n {
		r.AppendOutput(StreamStdout, []byte(fmt.Sprintf("churn %08d|", i)))
	}
}

func numbered(i int) []byte { return []byte(fmt.Sprintf("event %04d|", i)) }

func TestLentDataStaysUntilNextCall(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		r := m.new(Config{MaxBytes: 4096})
		for i := range 20 {
			r.AppendOutput(StreamStdout, numbered(i))
		}
		c := r.Cursor(0)
		evs, _, err := c.Next(t.Context())
		if err != nil || len(evs) != 20 {
			t.Fatalf("next: %d events, %v", len(evs), err)
		}
		churn(r, 2000)
		for i, ev := range evs {
			if !bytes.Equal(ev.Data, numbered(i)) {
				t.Fatalf("lent event %d changed to %q before the next call", i, ev.Data)
			}
		}
		if _, gap, _ := c.Next(t.Context()); gap == nil {
			t.Fatal("want a gap after the churn")
		}
		if m.backed {
			return // no slabs: the rest is about them
		}
		if len(c.held) != 0 {
			t.Errorf("cursor still holds %d slabs after a gap", len(c.held))
		}
		churn(r, 2000)
		if r.spare == nil {
			t.Error("no slab was recycled after the lease ended")
		}
	})
}

func TestReadDataIsNeverReused(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		r := m.new(Config{MaxBytes: 4096})
		for i := range 20 {
			r.AppendOutput(StreamStdout, numbered(i))
		}
		evs, _ := r.Read(nil, 0, 0, 0)
		churn(r, 2000)
		c := r.Cursor(0)
		for range 10 { // cursors and recycling go on around the pinned slabs
			c.Next(t.Context())
			churn(r, 200)
		}
		for i, ev := range evs {
			if !bytes.Equal(ev.Data, numbered(i)) {
				t.Fatalf("event %d from Read changed to %q", i, ev.Data)
			}
		}
	})
}

// TestDroppedCursorLeavesSlabsToTheCollector: slabs lent to a cursor that
// is never called again are not reused; the ring carries on with new ones.
func TestDroppedCursorLeavesSlabsToTheCollector(t *testing.T) {
	t.Parallel()
	r := New(Config{MaxBytes: 4096})
	for i := range 20 {
		r.AppendOutput(StreamStdout, numbered(i))
	}
	evs, _, _ := r.Cursor(0).Next(t.Context())
	churn(r, 2000)
	for i, ev := range evs {
		if !bytes.Equal(ev.Data, numbered(i)) {
			t.Fatalf("event %d lent to a dropped cursor changed to %q", i, ev.Data)
		}
	}
	if st := r.Stats(); st.Bytes > 4096 {
		t.Errorf("retained %d bytes over the bound", st.Bytes)
	}
}
