package replay

import (
	"errors"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkAppendRead32K appends 32 KiB outputs while one cursor reader
// keeps up: the writer never gets more than half a ring (16 events) ahead,
// so every byte is delivered and the figure is end-to-end throughput.
// Target: at least 2 GB/s.
func BenchmarkAppendRead32K(b *testing.B) {
	r := New(Config{})
	p := make([]byte, 32<<10)
	var delivered atomic.Uint64 // sequence the reader has consumed
	var wg sync.WaitGroup
	var gaps int
	c := r.Cursor(0)
	wg.Go(func() {
		for {
			evs, gap, err := c.Next(b.Context())
			if err != nil {
				return
			}
			if gap != nil {
				gaps++
			}
			delivered.Store(c.After())
			_ = evs
		}
	})
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	var seq uint64
	for b.Loop() {
		for seq > delivered.Load()+16 {
			runtime.Gosched()
		}
		seq, _ = r.AppendOutput(StreamPTY, p)
	}
	r.Append(exitEvent(0))
	wg.Wait()
	b.ReportMetric(float64(gaps), "gaps")
}

// BenchmarkAppendFollow32K is BenchmarkAppendRead32K without flow control:
// the writer runs free and the reader takes what it can, with gaps.
func BenchmarkAppendFollow32K(b *testing.B) {
	r := New(Config{})
	p := make([]byte, 32<<10)
	var wg sync.WaitGroup
	var read uint64
	c := r.Cursor(0)
	wg.Go(func() {
		for {
			evs, _, err := c.Next(b.Context())
			if err != nil {
				return
			}
			for i := range evs {
				read += uint64(len(evs[i].Data))
			}
		}
	})
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		r.AppendOutput(StreamPTY, p)
	}
	r.Append(exitEvent(0))
	wg.Wait()
	b.ReportMetric(float64(read)/float64(b.N*len(p)), "read/written")
}

// BenchmarkAppendHeld32K is BenchmarkAppendFollow32K with one hold that
// the writer acks after each append, and WaitRoom before each: the cost
// of holds on the hot path, which should not be measurable.
func BenchmarkAppendHeld32K(b *testing.B) {
	r := New(Config{})
	h := r.Hold(0)
	p := make([]byte, 32<<10)
	var wg sync.WaitGroup
	var read uint64
	c := r.Cursor(0)
	wg.Go(func() {
		for {
			evs, _, err := c.Next(b.Context())
			if err != nil {
				return
			}
			for i := range evs {
				read += uint64(len(evs[i].Data))
			}
		}
	})
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.WaitRoom(b.Context()); err != nil {
			b.Fatal(err)
		}
		seq, _ := r.AppendOutput(StreamPTY, p)
		if err := h.Ack(seq); err != nil {
			b.Fatal(err)
		}
	}
	r.Append(exitEvent(0))
	wg.Wait()
	h.Release()
	b.ReportMetric(float64(read)/float64(b.N*len(p)), "read/written")
}

// BenchmarkAppendHeldReader32K is flow control end to end: the reader
// holds the ring and acks each batch, the writer waits for room before
// each 32 KiB append, so every byte is delivered (gaps must be 0).
func BenchmarkAppendHeldReader32K(b *testing.B) {
	r := New(Config{})
	h := r.Hold(0)
	p := make([]byte, 32<<10)
	var wg sync.WaitGroup
	var gaps int
	c := r.Cursor(0)
	wg.Go(func() {
		defer h.Release()
		for {
			_, gap, err := c.Next(b.Context())
			if err != nil {
				return
			}
			if gap != nil {
				gaps++
			}
			h.Ack(c.After())
		}
	})
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.WaitRoom(b.Context()); err != nil {
			b.Fatal(err)
		}
		r.AppendOutput(StreamPTY, p)
	}
	r.Append(exitEvent(0))
	wg.Wait()
	b.ReportMetric(float64(gaps), "gaps")
}

// BenchmarkAppendOutputSmall is the interactive case: short PTY writes
// with nobody reading.
func BenchmarkAppendOutputSmall(b *testing.B) {
	r := New(Config{})
	p := []byte("$ ls -l\r\n")
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		r.AppendOutput(StreamPTY, p)
	}
}

// BenchmarkReadHistory1MiB replays a full default ring (1 MiB in 4 KiB
// outputs) through a new Cursor. Target: at most 1 ms.
func BenchmarkReadHistory1MiB(b *testing.B) {
	r := New(Config{})
	p := make([]byte, 4<<10)
	for range DefaultMaxBytes / len(p) {
		r.AppendOutput(StreamStdout, p)
	}
	r.Append(exitEvent(0))
	b.ReportAllocs()
	for b.Loop() {
		c := r.Cursor(0)
		n := 0
		for {
			evs, gap, err := c.Next(b.Context())
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil || gap != nil {
				b.Fatalf("gap %+v, err %v", gap, err)
			}
			n += len(evs)
		}
		if n != DefaultMaxBytes/len(p)+1 {
			b.Fatalf("read %d events", n)
		}
	}
}

// BenchmarkIdleRings measures the memory of rings that hold what an idle
// execution has: a started event and a couple of short outputs. Target:
// 10,000 of them in at most 40 MiB.
func BenchmarkIdleRings(b *testing.B) {
	const rings = 10000
	var perRing float64
	for b.Loop() {
		perRing = idleRingBytes(rings)
	}
	b.ReportMetric(perRing, "B/ring")
	b.ReportMetric(perRing*rings/(1<<20), "MiB/10k-rings")
}

func idleRingBytes(n int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rings := make([]*Ring, n)
	for i := range rings {
		r := New(Config{})
		r.Append(Event{Kind: KindStarted, Rows: 24, Cols: 80})
		r.AppendOutput(StreamPTY, []byte("user@host:~$ "))
		r.AppendOutput(StreamPTY, []byte("\x1b[?2004h"))
		rings[i] = r
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(rings)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}
