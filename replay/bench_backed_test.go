package replay

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"
)

// BenchmarkStorage compares a ring in memory with a backed one: appending
// 32 KiB and 64-byte outputs with nobody reading, reading a full ring's
// history through a cursor, and reading into reserved memory (Reserve,
// Extend, a copy standing in for read(2), Commit), in one piece or in
// pieces of 4 KiB as a terminal gives them.
func BenchmarkStorage(b *testing.B) {
	for _, size := range []int{32 << 10, 64} {
		for _, m := range modes {
			p := bytes.Repeat([]byte{'x'}, size)
			b.Run(fmt.Sprintf("append/%d/%s", size, m.name), func(b *testing.B) {
				r := m.new(Config{})
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					r.AppendOutput(StreamPTY, p)
				}
			})
			b.Run(fmt.Sprintf("reserve/%d/%s", size, m.name), func(b *testing.B) {
				r := m.new(Config{})
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					r.Reserve(StreamPTY, size)
					mem, _ := r.Extend(size)
					copy(mem, p)
					r.Commit(StreamPTY, size)
				}
			})
			b.Run(fmt.Sprintf("reserve-4k-pieces/%d/%s", size, m.name), func(b *testing.B) {
				r := m.new(Config{})
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					r.Reserve(StreamPTY, 32<<10)
					for off := 0; off < size; off += 4 << 10 {
						mem, _ := r.Extend(min(4<<10, size-off))
						copy(mem, p[off:])
					}
					r.Commit(StreamPTY, size)
				}
			})
			b.Run(fmt.Sprintf("read/%d/%s", size, m.name), func(b *testing.B) {
				r := m.new(Config{})
				for range DefaultMaxEvents {
					r.AppendOutput(StreamPTY, p)
				}
				st := r.Stats()
				b.SetBytes(int64(st.Bytes))
				b.ReportAllocs()
				for b.Loop() {
					c := r.Cursor(0)
					for {
						_, _, err := c.Next(b.Context())
						if errors.Is(err, io.EOF) || err != nil {
							break
						}
						if c.After() == st.Appended {
							break
						}
					}
				}
			})
		}
	}
}

// touchedPages counts the 4 KiB pages of mem that are not all zero.
func touchedPages(mem []byte) int {
	n := 0
	zero := make([]byte, 4096)
	for off := 0; off < len(mem); off += 4096 {
		if !bytes.Equal(mem[off:min(off+4096, len(mem))], zero[:min(4096, len(mem)-off)]) {
			n++
		}
	}
	return n
}

// TestBackedMemoryTouched: a backed ring without holds touches at most
// what it retains plus two largest records, however long it runs (the
// allocator goes back to the start), at most 256 KiB more than the Go
// heap of a ring in memory with the same output, and an idle one a page
// or two. Not parallel: it measures the heap.
func TestBackedMemoryTouched(t *testing.T) {
	cfg := Config{}
	limit := hdrSize + layoutOf(cfg).soft
	for _, tt := range []struct {
		name   string
		size   int
		events int
	}{
		{"idle", 13, 3},
		{"32 KiB outputs", 32 << 10, 400},
		{"64-byte outputs", 64, 40000},
		{"4 KiB outputs", 4 << 10, 4000},
	} {
		p := bytes.Repeat([]byte{'x'}, tt.size)
		fill := func(r *Ring) *Ring {
			for range tt.events {
				r.AppendOutput(StreamPTY, p)
			}
			return r
		}
		mem := memoryFor(cfg)
		backedHeap := heapOf(func() any { return fill(New(Config{Memory: mem})) })
		touched := touchedPages(mem) * 4096
		heap := heapOf(func() any { return fill(New(cfg)) })
		t.Logf("%s: backed ring touches %d KiB of %d KiB and %d KiB of Go heap; a ring in memory takes %d KiB",
			tt.name, touched>>10, len(mem)>>10, backedHeap>>10, heap>>10)
		if touched > limit {
			t.Errorf("%s: touched %d bytes, want at most %d", tt.name, touched, limit)
		}
		if tt.name == "idle" && touched > 2*4096 {
			t.Errorf("idle ring touched %d bytes", touched)
		}
		if tt.name != "idle" && touched+backedHeap > heap+256<<10 {
			t.Errorf("%s: touched %d KiB, over 256 KiB more than the %d KiB of a ring in memory", tt.name, touched>>10, heap>>10)
		}
	}
}

// heapOf returns the Go heap that what f builds keeps alive, roughly.
func heapOf(f func() any) int {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := f()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(v)
	return int(after.HeapAlloc) - int(before.HeapAlloc)
}
