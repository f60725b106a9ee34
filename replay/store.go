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
	max    int // 0: none outstanding
	pieces pieces
}

// pieces are the reads an outstanding reservation lent memory to: all
// but the last were filled (by construction: the reader asks for the next
// piece after the read), the last perhaps not yet.
type pieces struct {
	off, k int // the last piece: where it starts and its length; k = 0 before the first
}

// filled returns the bytes of the pieces before the last.
func (p pieces) filled() int { return p.off }

// end returns the bytes of all pieces.
func (p pieces) end() int { return p.off + p.k }

// next returns the pieces with one more of k bytes, or an error when it
// does not fit max.
func (p pieces) next(k, max int) (pieces, error) {
	if k <= 0 || p.end()+k > max {
		return p, invalid(KindOutput, fmt.Sprintf("extend by %d bytes a reservation of %d with %d lent", k, max, p.end()))
	}
	return pieces{off: p.end(), k: k}, nil
}

// commitError checks that Commit of n bytes counts every piece but the
// last in full.
func (p pieces) commitError(s, reserved Stream, n int) error {
	if s != reserved || n < p.filled() || n > p.end() {
		return invalid(KindOutput, fmt.Sprintf("commit of %d bytes of %s, lent %d (the last piece from %d) of %s", n, s, p.end(), p.filled(), reserved))
	}
	return nil
}

// The intent's piece word (offIntentLen): the last piece's offset in the
// high half, its length in the low half; intentDone marks that Commit
// began, and then the low half is the event's length.
const intentDone = 1 << 63

func pieceWord(off, k int) uint64 { return uint64(off)<<32 | uint64(k) }

// Reserve begins an output event of stream s of at most size bytes
// (size <= MaxReserve), to be read straight into ring memory piece by
// piece: Extend lends each piece, and Commit publishes the event. It
// returns the event's memory, all size bytes of it, for the caller to look
// at what was read; only what Extend lent may be read into.
//
// In a backed ring the memory is in the log, and the reservation is an
// intent Recover honours: if the writer dies before Commit, Recover
// publishes every piece before the last, and the last one too when its
// read overwrote the canary Extend wrote over its first min(k, 8) bytes
// (the read never happened otherwise). So the caller reads each piece
// with one read that fills it entirely, or not at all: exactly what
// FIONREAD said is queued, and asks for the next piece only after that
// read.
//
// In a backed ring Reserve and Extend evict what an Append of the event
// so far would; an in-memory ring lends a buffer of its own and evicts at
// Commit, as the Append does. Neither blocks. One reservation may be
// outstanding; other events may be appended meanwhile (the output gets
// the next sequence when it is committed). The memory is the ring's again
// after Commit.
func (r *Ring) Reserve(s Stream, size int) ([]byte, error) {
	if !s.valid() || size <= 0 || size > MaxReserve {
		return nil, invalid(KindOutput, fmt.Sprintf("reserve of %d bytes of %s: needs a stream and 1 to %d bytes", size, s, MaxReserve))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return nil, ErrClosed
	case (r.resv != nil && r.resv.max > 0) || (r.b != nil && r.b.pend != nil):
		return nil, invalid(KindOutput, "a reservation is outstanding")
	case r.b == nil:
		if r.resv == nil || cap(r.resv.buf) < size {
			r.resv = &memReservation{buf: make([]byte, max(size, 4<<10))}
		}
		r.resv.stream, r.resv.max, r.resv.pieces = s, size, pieces{}
		return r.resv.buf[:size:size], nil
	}
	ext := extent{size: uint32(recSize + align8(size))}
	ext.pos = r.allocate(ext.size)
	b := r.b
	b.reserved = pending{ext: ext, stream: s, max: size}
	b.pend = &b.reserved
	b.live += ext.size
	pos := ext.pos
	b.word(offIntentPos).Store(uint64(pos))
	b.word(offIntentLen).Store(pieceWord(0, 0))
	b.word(offIntentStr).Store(uint64(s))
	b.word(offIntentT).Store(uint64(time.Now().UnixNano()))
	b.stepped()
	b.word(offIntent).Store(r.last + 1)
	return b.log[pos+recSize : pos+recSize+uint32(size) : pos+recSize+uint32(size)], nil
}

// Extend lends the next k bytes of the outstanding reservation, right
// after the pieces lent before, for one read that fills them: every
// earlier piece counts as read from now on. Extend without a reservation,
// of k < 1, or beyond the size reserved, is ErrInvalid and leaves the
// reservation as it was.
func (r *Ring) Extend(k int) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.b == nil {
		rv := r.resv
		if rv == nil || rv.max == 0 {
			return nil, invalid(KindOutput, "extend without a reservation")
		}
		next, err := rv.pieces.next(k, rv.max)
		if err != nil {
			return nil, err
		}
		rv.pieces = next
		return rv.buf[next.off:next.end():next.end()], nil
	}
	p := r.b.pend
	if p == nil {
		return nil, invalid(KindOutput, "extend without a reservation")
	}
	next, err := p.pieces.next(k, p.max)
	if err != nil {
		return nil, err
	}
	r.makeRoom(next.end())
	p.pieces = next
	return r.b.lend(p), nil
}

// lend plants a fresh canary over the first bytes of the reservation's
// last piece, and then publishes the piece. First it says that every
// piece before was read (no piece outstanding), so that no earlier piece
// is ever compared with a canary it did not overwrite: Recover compares
// the outstanding piece's bytes with the current canary word, and only
// the piece in flight may, by chance, look unread.
func (b *backing) lend(p *pending) []byte {
	b.word(offIntentLen).Store(pieceWord(p.pieces.off, 0))
	b.stepped()
	start := p.ext.pos + recSize + uint32(p.pieces.off)
	mem := b.log[start : start+uint32(p.pieces.k) : start+uint32(p.pieces.k)]
	canary := rand.Uint64()
	var c [8]byte
	binary.LittleEndian.PutUint64(c[:], canary)
	copy(mem, c[:])
	b.stepped()
	b.word(offCanary).Store(canary)
	b.stepped()
	b.word(offIntentLen).Store(pieceWord(p.pieces.off, p.pieces.k))
	return mem
}

// Commit appends the first n bytes of the reserved memory as output of
// stream s (the stream reserved) and returns its sequence. n counts what
// was read: every piece Extend lent but the last in full, and what the
// last read returned; n = 0 before a second piece cancels the
// reservation. Commit without a reservation, of another stream, of more
// than was lent or of less than the earlier pieces is ErrInvalid, and
// after the exit ErrClosed; both cancel the reservation.
func (r *Ring) Commit(s Stream, n int) (uint64, error) {
	r.mu.Lock()
	defer r.unlock()
	if r.b == nil {
		return r.commitMemory(s, n)
	}
	p := r.b.pend
	if p == nil {
		return 0, invalid(KindOutput, "commit without a reservation")
	}
	switch err := p.pieces.commitError(s, p.stream, n); {
	case err != nil:
		r.cancel()
		return 0, err
	case n == 0:
		r.cancel()
		return 0, nil
	case r.closed:
		r.cancel()
		return 0, ErrClosed
	}
	b := r.b
	b.word(offIntentLen).Store(pieceWord(0, n) | intentDone)
	b.stepped()
	r.makeRoom(n) // in case other events were appended since the last Extend
	seq := r.last + 1
	rc := record{seq: seq, time: time.Now().UnixNano(), prev: b.lastPos, len: uint32(n), kind: KindOutput, stream: s}
	r.counted(s, n)
	rc.ends = r.ends()
	b.put(p.ext.pos, &rc)
	e := b.shrink(p, n)
	r.retain(e)
	b.publish(e.pos, seq)
	r.appended(KindOutput)
	return seq, nil
}

// shrink ends the reservation p, of which n bytes became an event, and
// returns the event's extent: the rest of the reserved memory is free
// again.
func (b *backing) shrink(p *pending, n int) extent {
	e := extent{p.ext.pos, uint32(recSize + align8(n))}
	if b.frontier == p.ext.pos+p.ext.size {
		b.frontier = e.pos + e.size
	}
	b.live -= p.ext.size
	b.pend = nil
	return e
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
	if rv == nil || rv.max == 0 {
		return 0, invalid(KindOutput, "commit without a reservation")
	}
	rv.max = 0
	switch err := rv.pieces.commitError(s, rv.stream, n); {
	case err != nil:
		return 0, err
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
