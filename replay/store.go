package replay

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// storeBacked writes ev, numbered, as the newest event of a backed ring
// and publishes it.
func (r *Ring) storeBacked(ev *Event, payload []byte) {
	b := r.b
	body := payload
	if ev.Kind == KindOutput {
		body = ev.Data
	}
	size := uint32(recSize + align8(len(body)))
	pos := r.allocate(size)
	half := len(body) / 2
	copy(b.log[pos+recSize:], body[:half])
	b.stepped() // torn data
	copy(b.log[pos+recSize+uint32(half):], body[half:])
	rc := record{
		seq: ev.Seq, time: ev.Time.UnixNano(), prev: b.lastPos, len: uint32(len(body)),
		signal: int32(ev.Signal), rows: ev.Rows, cols: ev.Cols, kind: ev.Kind, stream: ev.Stream,
	}
	if ev.Kind == KindOutput {
		r.counted(ev.Stream, len(body))
	}
	rc.ends = r.ends()
	b.put(pos, &rc)
	r.retain(extent{pos, size})
	b.publish(pos, ev.Seq)
}

// counted adds n bytes of output on stream s.
func (r *Ring) counted(s Stream, n int) {
	r.offset[s] += uint64(n)
	r.outputBytes += uint64(n)
}

// ends returns the stream ends as records keep them.
func (r *Ring) ends() [3]uint64 {
	return [3]uint64{r.offset[StreamPTY], r.offset[StreamStdout], r.offset[StreamStderr]}
}

// allocate returns log memory for size bytes, evicting the oldest events
// while there is none: only when holds keep the log fuller than it was
// sized for, or control payloads fill it.
func (r *Ring) allocate(size uint32) uint32 {
	for {
		if pos, ok := r.b.place(size); ok {
			r.b.took(pos, size)
			return pos
		}
		if r.n == 0 {
			panic("replay: no room in the log of an empty ring")
		}
		r.evictOldest()
	}
}

// retain adds e as the extent of the newest event.
func (r *Ring) retain(e extent) {
	b := r.b
	if r.n == len(b.ext) {
		b.ext, r.head = grown(b.ext, r.head, r.n, r.maxEvents), 0
	}
	b.ext[r.index(r.n)] = e
	r.n++
	b.retain(e)
}

// evictBacked evicts the oldest event of a backed ring, publishing the
// new oldest before its memory can be reused.
func (r *Ring) evictBacked() {
	b := r.b
	e := b.ext[r.head]
	rc := b.get(e.pos)
	if r.onEvict != nil {
		r.onEvict(b.event(e.pos, nil))
	}
	size := uint64(rc.dataLen())
	r.evictedBytes += size
	if r.pinned() && rc.seq > r.floor {
		r.forcedBytes += size
	}
	b.publishFirst(rc.seq+1, rc.ends)
	b.release(e)
	b.ext[r.head] = extent{}
	r.head = r.index(1)
	r.n--
}

// memReservation is the outstanding Reserve of a ring in memory: a
// buffer that Commit appends from.
type memReservation struct {
	buf    []byte
	stream Stream
	n      int // 0: none outstanding
}

// intentDone marks in the intent's length that Commit began: the read
// happened, whatever the canary says.
const intentDone = 1 << 63

// Reserve returns n bytes of memory (n <= MaxReserve) for the next output
// of stream s, to read into and then Commit. In a backed ring the memory
// is in the log, and the reservation is an intent Recover honours: if the
// writer dies after the read and before Commit, Recover publishes the
// event with its n bytes when the read overwrote the canary Reserve wrote
// over the first min(n, 8) bytes, and drops it otherwise (the read never
// happened). So the caller reads exactly n bytes, or nothing: what
// FIONREAD said is queued.
//
// Reserve evicts what an Append of n bytes would and never blocks. One
// reservation may be outstanding; other events may be appended meanwhile
// (the output gets the next sequence when it is committed). The memory
// is the ring's again after Commit.
func (r *Ring) Reserve(s Stream, n int) ([]byte, error) {
	if !s.valid() || n <= 0 || n > MaxReserve {
		return nil, invalid(KindOutput, fmt.Sprintf("reserve of %d bytes of %s: needs a stream and 1 to %d bytes", n, s, MaxReserve))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return nil, ErrClosed
	case (r.resv != nil && r.resv.n > 0) || (r.b != nil && r.b.pend != nil):
		return nil, invalid(KindOutput, "a reservation is outstanding")
	case r.b == nil:
		if r.resv == nil || cap(r.resv.buf) < n {
			r.resv = &memReservation{buf: make([]byte, max(n, 4<<10))}
		}
		r.resv.stream, r.resv.n = s, n
		return r.resv.buf[:n:n], nil
	}
	r.makeRoom(n)
	size := uint32(recSize + align8(n))
	pos := r.allocate(size)
	b := r.b
	b.reserved = pending{ext: extent{pos, size}, stream: s, n: n}
	b.pend = &b.reserved
	b.live += size
	mem := b.log[pos+recSize : pos+recSize+uint32(n) : pos+recSize+uint32(n)]
	canary := rand.Uint64()
	var c [8]byte
	binary.LittleEndian.PutUint64(c[:], canary)
	copy(mem, c[:])
	b.word(offCanary).Store(canary)
	b.word(offIntentPos).Store(uint64(pos))
	b.word(offIntentLen).Store(uint64(n))
	b.word(offIntentStr).Store(uint64(s))
	b.word(offIntentT).Store(uint64(time.Now().UnixNano()))
	b.stepped()
	b.word(offIntent).Store(r.last + 1)
	return mem, nil
}

// Commit appends the first n bytes of the reserved memory as output of
// stream s (the stream reserved) and returns its sequence; n = 0 cancels
// the reservation. Commit without a reservation, of another stream or of
// more than was reserved is ErrInvalid, and after the exit ErrClosed;
// both cancel the reservation.
func (r *Ring) Commit(s Stream, n int) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.b == nil {
		return r.commitMemory(s, n)
	}
	p := r.b.pend
	switch {
	case p == nil:
		return 0, invalid(KindOutput, "commit without a reservation")
	case s != p.stream || n < 0 || n > p.n:
		r.cancel()
		return 0, invalid(KindOutput, fmt.Sprintf("commit of %d bytes of %s, reserved %d of %s", n, s, p.n, p.stream))
	case n == 0:
		r.cancel()
		return 0, nil
	case r.closed:
		r.cancel()
		return 0, ErrClosed
	}
	b := r.b
	b.word(offIntentLen).Store(uint64(n) | intentDone)
	b.stepped()
	r.makeRoom(n) // in case other events were appended since Reserve
	seq := r.last + 1
	rc := record{seq: seq, time: time.Now().UnixNano(), prev: b.lastPos, len: uint32(n), kind: KindOutput, stream: s}
	r.counted(s, n)
	rc.ends = r.ends()
	b.put(p.ext.pos, &rc)
	b.pend = nil
	b.live -= p.ext.size
	r.retain(p.ext)
	b.publish(p.ext.pos, seq)
	r.appended(KindOutput)
	return seq, nil
}

// cancel drops the outstanding reservation of a backed ring.
func (r *Ring) cancel() {
	b := r.b
	b.word(offIntent).Store(0)
	e := b.pend.ext
	if b.frontier == e.pos+e.size {
		b.frontier = e.pos
	}
	b.live -= e.size
	b.pend = nil
}

func (r *Ring) commitMemory(s Stream, n int) (uint64, error) {
	rv := r.resv
	if rv == nil || rv.n == 0 {
		return 0, invalid(KindOutput, "commit without a reservation")
	}
	reserved := rv.n
	rv.n = 0
	switch {
	case s != rv.stream || n < 0 || n > reserved:
		return 0, invalid(KindOutput, fmt.Sprintf("commit of %d bytes of %s, reserved %d of %s", n, s, reserved, rv.stream))
	case n == 0:
		return 0, nil
	}
	ev := Event{Kind: KindOutput, Stream: s, Data: rv.buf[:n]}
	return r.appendLocked(&ev)
}

// Word returns the i-th (i < 4) of the words a ring keeps for its caller,
// zero in a new ring: in a backed ring they live in its memory and survive
// the writer, for state that must match the ring's (how much input was
// written). Load and store them atomically; the ring never touches them.
// Word panics for an i out of range.
func (r *Ring) Word(i int) *atomic.Uint64 {
	if i < 0 || i >= numWords {
		panic(fmt.Sprintf("replay: word %d of %d", i, numWords))
	}
	if r.b != nil {
		return r.b.word(offWords + 8*i)
	}
	return &r.words[i]
}
