package replay

import "bytes"

// Output memory. Allocating a fresh copy of every output costs more than
// the copy itself: at 32 KiB per append, the collector and the page
// faults on fresh memory cap a ring near 2 GB/s, while copying into warm,
// reused memory runs at tens of GB/s. So output is copied into slabs that
// the ring reuses once nothing can read them any more:
//
//   - no retained event points into the slab (events == 0),
//   - no cursor's current batch does (leases == 0): Cursor.Next lends its
//     batch's slabs until the cursor's next call,
//   - Read never handed out Data from it (pinned): Read's callers may keep
//     Data forever, so a slab they saw is left to the garbage collector.
//
// Slabs start small and double up to a limit, so an idle ring holds a few
// hundred bytes, not a whole slab. The ring keeps one spare full-size slab;
// any other free slab is left to the collector.
const (
	minSlab = 256
	maxSlab = 64 << 10
)

// slab is a chunk of output memory shared by consecutive output events.
// Its fields are guarded by the ring's mutex.
type slab struct {
	buf    []byte // len: bytes handed out; cap: the slab's size
	events int    // retained events whose Data is in buf
	leases int    // cursor batches that point into buf
	pinned bool   // Read returned Data from buf: never reuse it
}

// slabLimit is the largest slab of a ring bounded by maxBytes: a sixteenth
// of the bound, so slabs add little to it, within [minSlab, maxSlab].
func slabLimit(maxBytes int) int {
	n := minSlab
	for n < maxSlab && n < maxBytes/16 {
		n *= 2
	}
	return n
}

// store copies p into ring memory and returns the copy and its slab, nil
// when p is too large for slabs and gets its own allocation.
func (r *Ring) store(p []byte) ([]byte, *slab) {
	if len(p) > r.slabMax/2 {
		return bytes.Clone(p), nil
	}
	if r.cur == nil || cap(r.cur.buf)-len(r.cur.buf) < len(p) {
		r.nextSlab(len(p))
	}
	s := r.cur
	start := len(s.buf)
	s.buf = append(s.buf, p...)
	s.events++
	return s.buf[start:len(s.buf):len(s.buf)], s
}

// nextSlab replaces the current slab with one that holds at least n bytes:
// twice the size of the last, up to the limit, reusing the spare if any.
func (r *Ring) nextSlab(n int) {
	old := r.cur
	size := minSlab
	if old != nil {
		size = min(2*cap(old.buf), r.slabMax)
	}
	for size < n {
		size *= 2
	}
	if r.spare != nil && size == r.slabMax {
		r.cur, r.spare = r.spare, nil
	} else {
		r.cur = &slab{buf: make([]byte, 0, size)}
	}
	if old != nil {
		r.recycle(old)
	}
}

// recycle keeps s as the spare if nothing can read it any more.
func (r *Ring) recycle(s *slab) {
	if s == r.cur || s.events > 0 || s.leases > 0 || s.pinned || r.spare != nil || cap(s.buf) != r.slabMax {
		return
	}
	s.buf = s.buf[:0]
	r.spare = s
}

// eachSlab calls f once for each slab that the retained events i up to
// i+n (exclusive) point into. Those slabs are consecutive, so comparing
// with the previous one suffices.
func (r *Ring) eachSlab(i, n int, f func(*slab)) {
	if r.b != nil {
		return // a backed ring copies what it hands out
	}
	var prev *slab
	for k := range n {
		if s := r.slots[r.index(i+k)].slab; s != nil && s != prev {
			f(s)
			prev = s
		}
	}
}
