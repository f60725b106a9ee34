package replay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// A backed ring (Config.Memory) keeps every event in memory the caller
// gives it, usually a MAP_SHARED mapping of a file on tmpfs, laid out so
// that Recover rebuilds the ring exactly after the writer died at any
// instruction: the page cache keeps every store that executed.
//
// Layout (little endian):
//
//	[0, 256)       header: magic, version, the bounds, a CRC of those; then
//	               the published state, each an aligned word stored atomically
//	[256, +log)    the log: records of 64 bytes followed by their payload
//	               (output data, or an encoded exit or notice), 8-aligned
//
// A record names its predecessor's position, so Recover walks back from
// the newest (lastPos) to the oldest retained one (first): where records
// lie is up to the allocator, which keeps the touched memory near the
// ring's bounds (see place).
//
// Publish order: an append writes the payload and the record (with its
// CRC32C), then stores lastPos, then commit (its sequence). An eviction
// publishes the new oldest sequence, with the stream offsets before it,
// into the inactive one of two blocks and then flips the selector, before
// anything overwrites the evicted record. A record past commit is ignored;
// a retained one that fails its CRC makes the memory ErrCorrupt.
//
// A reservation (Reserve) stores where it is, its stream, no pieces yet,
// and then intent = the sequence it would get. An append of another event
// meanwhile moves intent on before it stores commit, so intent > commit
// exactly while a reservation is outstanding. Each piece (Extend) is read
// by one read that fills it: Extend writes a random canary over the
// piece's first bytes, stores it in the canary word, and then stores the
// piece's offset and length in one word, which says that every piece
// before it was read. Recover publishes those earlier pieces, and the last
// one too when it finds its canary overwritten (the read happened: the
// kernel copies all of it) rather than intact (it never happened: the
// bytes are still in the kernel). Commit stores the event's length with a
// done mark before it writes the record, and Recover then trusts it.

const (
	hdrSize = 256
	recSize = 64 // a record without its payload

	// MaxReserve is the most a Reserve may ask for, and the largest output
	// event of a backed ring: Append splits longer output into events of
	// this size.
	MaxReserve = 64 << 10
	// MaxPayload bounds an exit's or notice's encoded text (reason and
	// message) in a backed ring; longer ones are ErrInvalid.
	MaxPayload = 4 << 10

	layoutVersion = 1
	maxRecord     = recSize + MaxReserve
	noPos         = math.MaxUint32
)

var magic = [8]byte{'T', 'G', 'R', 'E', 'P', 'L', 'A', 'Y'}

// ErrCorrupt is returned by Recover for memory that holds no ring, one made
// with other bounds or layout, or one whose published records are damaged.
var ErrCorrupt = errors.New("replay: ring memory corrupt")

// Header offsets.
const (
	offVersion   = 8
	offHdrCRC    = 12
	offMaxBytes  = 16
	offMaxEvents = 24
	offLogCap    = 32
	offCommit    = 64  // sequence of the newest published event
	offLastPos   = 72  // log position of a record with seq commit or commit+1
	offSel       = 80  // which first block is current
	offFirst     = 88  // two blocks of {first seq, stream ends before it [3]}
	firstBlock   = 32  // bytes per block
	offIntent    = 152 // == commit+1 while a reservation is outstanding
	offIntentPos = 160
	offIntentLen = 168
	offIntentStr = 176
	offIntentT   = 184
	offCanary    = 192
	offWords     = 200 // the caller's words (Word)
	numWords     = 4
)

// Record offsets.
const (
	rSeq    = 0
	rTime   = 8
	rEnds   = 16 // stream ends after this event, pty, stdout, stderr
	rPrev   = 40
	rLen    = 44
	rSignal = 48
	rRows   = 52
	rCols   = 54
	rKind   = 56
	rStream = 57
	rCRC    = 60
)

var castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// layout is the geometry of a backed ring with given bounds.
type layout struct {
	maxBytes, maxEvents int
	soft                int // the allocator wraps here when it can (see place)
	logCap              int
}

// perEvent is the log memory an event costs beyond its data, at most.
const perEvent = recSize + 8

func layoutOf(cfg Config) layout {
	cfg = cfg.normal()
	live := cfg.MaxBytes + perEvent*cfg.MaxEvents
	l := layout{maxBytes: cfg.MaxBytes, maxEvents: cfg.MaxEvents, soft: live + 2*maxRecord}
	// Holds may keep twice the bounds; the rest is room to place records
	// without forcing anything out, and control payloads.
	size := hdrSize + 2*live + 4*maxRecord + 16*MaxPayload
	size = (size + 4095) &^ 4095
	l.logCap = size - hdrSize
	return l
}

// MemorySize returns the length of the memory a ring bounded by cfg needs
// in Config.Memory (cfg.Memory itself is ignored). It is a multiple of
// 4096. The memory is touched as it is used: an idle ring writes one page,
// a full one without holds about MaxBytes + 72*MaxEvents + 128 KiB.
func MemorySize(cfg Config) int { return hdrSize + layoutOf(cfg).logCap }

func align8(n int) int { return (n + 7) &^ 7 }

// extent is the log memory of one retained event.
type extent struct{ pos, size uint32 }

// arc is a run of consecutive extents of retained events, in sequence
// order, contiguous in the log. Arcs are kept oldest first, so evicting
// the oldest event frees the front of the first arc.
type arc struct{ start, end uint32 }

// backing is the memory of a backed ring. Guarded by the ring's mutex,
// except the words (Word) and the log memory a reservation lent.
type backing struct {
	mem      []byte
	log      []byte
	soft     uint32
	ext      []extent // circular, indexed as Ring.slots is
	arcs     []arc
	frontier uint32   // end of the newest allocation
	live     uint32   // log bytes of the retained events and the reservation
	lastPos  uint32   // record of the newest event; noPos before the first
	sel      uint64   // current first block
	pend     *pending // an outstanding reservation, &reserved; nil when none
	reserved pending
	step     func() // see stepped; nil but in tests
}

// pending is an outstanding reservation.
type pending struct {
	ext    extent
	stream Stream
	max    int // the bytes reserved
	pieces pieces
}

// record is a decoded record header.
type record struct {
	seq    uint64
	time   int64
	ends   [3]uint64
	prev   uint32
	len    uint32
	signal int32
	rows   uint16
	cols   uint16
	kind   Kind
	stream Stream
}

func (b *backing) word(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&b.mem[off]))
}

// stepped calls the test hook step between the stores that publish an
// event (crash_test.go stops the writer there).
func (b *backing) stepped() {
	if b.step != nil {
		b.step()
	}
}

// newBacking lays out a fresh ring in mem. The magic goes last, so memory
// that a writer died initializing holds no ring.
func newBacking(mem []byte, l layout) *backing {
	checkMemory(mem, l)
	b := &backing{mem: mem, log: mem[hdrSize:], soft: uint32(l.soft), lastPos: noPos}
	clear(mem[:hdrSize])
	binary.LittleEndian.PutUint32(mem[offVersion:], layoutVersion)
	binary.LittleEndian.PutUint64(mem[offMaxBytes:], uint64(l.maxBytes))
	binary.LittleEndian.PutUint64(mem[offMaxEvents:], uint64(l.maxEvents))
	binary.LittleEndian.PutUint64(mem[offLogCap:], uint64(l.logCap))
	binary.LittleEndian.PutUint32(mem[offHdrCRC:], headerSum(mem))
	b.word(offLastPos).Store(noPos)
	b.word(offFirst).Store(1)
	b.word(offFirst + firstBlock).Store(1)
	b.stepped()
	copy(mem, magic[:])
	return b
}

// checkMemory panics for memory a ring cannot use: a programming error.
func checkMemory(mem []byte, l layout) {
	if err := memoryError(mem, l); err != nil {
		panic(err.Error())
	}
}

func memoryError(mem []byte, l layout) error {
	switch {
	case len(mem) != hdrSize+l.logCap:
		return fmt.Errorf("replay: memory of %d bytes, a ring of max_bytes %d and max_events %d needs %d (MemorySize)",
			len(mem), l.maxBytes, l.maxEvents, hdrSize+l.logCap)
	case uintptr(unsafe.Pointer(&mem[0]))%8 != 0:
		return errors.New("replay: memory not 8-byte aligned")
	case l.logCap >= noPos:
		return fmt.Errorf("replay: a backed ring of max_bytes %d and max_events %d needs over 4 GiB", l.maxBytes, l.maxEvents)
	}
	return nil
}

func headerSum(mem []byte) uint32 {
	return crc32.Update(crc32.Checksum(mem[offVersion:offHdrCRC], castagnoli()), castagnoli(), mem[offMaxBytes:offCommit])
}

// put writes rc as the record at pos; the payload after it is in place.
func (b *backing) put(pos uint32, rc *record) {
	p := b.log[pos : pos+recSize]
	le := binary.LittleEndian
	le.PutUint64(p[rSeq:], rc.seq)
	le.PutUint64(p[rTime:], uint64(rc.time))
	b.stepped() // a torn record
	for i, e := range rc.ends {
		le.PutUint64(p[rEnds+8*i:], e)
	}
	le.PutUint32(p[rPrev:], rc.prev)
	le.PutUint32(p[rLen:], rc.len)
	le.PutUint32(p[rSignal:], uint32(rc.signal))
	le.PutUint16(p[rRows:], rc.rows)
	le.PutUint16(p[rCols:], rc.cols)
	p[rKind], p[rStream], p[58], p[59] = byte(rc.kind), byte(rc.stream), 0, 0
	b.stepped()
	le.PutUint32(p[rCRC:], b.sum(pos, rc))
}

// sum is the CRC32C of the record at pos, and of its payload unless it is
// output (whose data a reader writes straight into the log).
func (b *backing) sum(pos uint32, rc *record) uint32 {
	c := crc32.Checksum(b.log[pos:pos+rCRC], castagnoli())
	if rc.kind != KindOutput {
		c = crc32.Update(c, castagnoli(), b.payload(pos, rc))
	}
	return c
}

func (b *backing) payload(pos uint32, rc *record) []byte {
	return b.log[pos+recSize : pos+recSize+rc.len]
}

// get decodes the record at pos, trusted: it was written by this ring or
// checked by Recover.
func (b *backing) get(pos uint32) record {
	p := b.log[pos : pos+recSize]
	le := binary.LittleEndian
	rc := record{
		seq: le.Uint64(p[rSeq:]), time: int64(le.Uint64(p[rTime:])),
		prev: le.Uint32(p[rPrev:]), len: le.Uint32(p[rLen:]), signal: int32(le.Uint32(p[rSignal:])),
		rows: le.Uint16(p[rRows:]), cols: le.Uint16(p[rCols:]), kind: Kind(p[rKind]), stream: Stream(p[rStream]),
	}
	for i := range rc.ends {
		rc.ends[i] = le.Uint64(p[rEnds+8*i:])
	}
	return rc
}

// check decodes the record at pos for Recover, which trusts nothing.
func (b *backing) check(pos uint32) (record, error) {
	if uint64(pos)+recSize > uint64(len(b.log)) || pos%8 != 0 {
		return record{}, fmt.Errorf("record position %d outside the log", pos)
	}
	rc := b.get(pos)
	switch {
	case uint64(pos)+recSize+uint64(rc.len) > uint64(len(b.log)):
		return rc, fmt.Errorf("record at %d: length %d beyond the log", pos, rc.len)
	case binary.LittleEndian.Uint32(b.log[pos+rCRC:]) != b.sum(pos, &rc):
		return rc, fmt.Errorf("record at %d: CRC mismatch", pos)
	case !rc.kind.valid():
		return rc, fmt.Errorf("record at %d: kind %d", pos, rc.kind)
	case rc.kind == KindOutput && (!rc.stream.valid() || rc.len == 0 || rc.len > MaxReserve):
		return rc, fmt.Errorf("record at %d: output of stream %d, %d bytes", pos, rc.stream, rc.len)
	case rc.kind != KindOutput && rc.len > MaxPayload:
		return rc, fmt.Errorf("record at %d: payload of %d bytes", pos, rc.len)
	}
	return rc, nil
}

// total is the output bytes up to and including the record's event.
func (rc *record) total() uint64 { return rc.ends[0] + rc.ends[1] + rc.ends[2] }

// dataLen is the output bytes of the record's event.
func (rc *record) dataLen() int {
	if rc.kind != KindOutput {
		return 0
	}
	return int(rc.len)
}

// event decodes the event of the record at pos. Its Data points into the
// log unless dst is given: then Data is appended to *dst.
func (b *backing) event(pos uint32, dst *[]byte) Event {
	rc := b.get(pos)
	ev := Event{Seq: rc.seq, Kind: rc.kind, Time: time.Unix(0, rc.time)}
	switch rc.kind {
	case KindOutput:
		ev.Stream = rc.stream
		ev.Offset = rc.ends[rc.stream-1] - uint64(rc.len)
		ev.Data = b.payload(pos, &rc)
		if dst != nil {
			start := len(*dst)
			*dst = append(*dst, ev.Data...)
			ev.Data = (*dst)[start:len(*dst):len(*dst)]
		}
	case KindStarted, KindResize:
		ev.Rows, ev.Cols = rc.rows, rc.cols
	case KindSignal:
		ev.Signal = int(rc.signal)
	case KindExit:
		ev.Exit = decodeExit(b.payload(pos, &rc))
	case KindNotice:
		ev.Notice = decodeNotice(b.payload(pos, &rc))
	}
	return ev
}

// publishFirst makes first the oldest retained sequence, with ends the
// stream ends before it, in one atomic flip.
func (b *backing) publishFirst(first uint64, ends [3]uint64) {
	next := b.sel ^ 1
	off := offFirst + firstBlock*int(next)
	b.word(off).Store(first)
	for i, e := range ends {
		b.word(off + 8 + 8*i).Store(e)
	}
	b.stepped()
	b.word(offSel).Store(next)
	b.sel = next
}

// publish makes the record at pos, of sequence seq, the newest event.
func (b *backing) publish(pos uint32, seq uint64) {
	b.stepped()
	b.word(offLastPos).Store(uint64(pos))
	b.stepped()
	if b.pend != nil {
		b.word(offIntent).Store(seq + 1) // the reservation moves on
		b.stepped()
	}
	b.word(offCommit).Store(seq)
	b.lastPos = pos
}

// fits reports whether [p, p+size) is free log memory.
func (b *backing) fits(p, size uint32) bool {
	end := uint64(p) + uint64(size)
	if end > uint64(len(b.log)) {
		return false
	}
	overlaps := func(start, stop uint32) bool { return uint64(start) < end && p < stop }
	for _, a := range b.arcs {
		if overlaps(a.start, a.end) {
			return false
		}
	}
	return b.pend == nil || !overlaps(b.pend.ext.pos, b.pend.ext.pos+b.pend.ext.size)
}

// place finds free log memory for size bytes, or reports that the oldest
// events must go first. It appends after the newest allocation, and goes
// back to the start of the log when the start is free once past what the
// ring retains plus two largest records: so the memory touched stays near
// what the ring holds, and within soft, since without holds a ring
// retains at most soft - 2*maxRecord. When the ring grows after that (or
// holds keep up to twice the bounds), it fills any free stretch.
func (b *backing) place(size uint32) (uint32, bool) {
	f := b.frontier
	wrap := min(uint64(b.soft), uint64(b.live)+uint64(size)+2*maxRecord)
	switch {
	case len(b.arcs) == 0 && b.pend == nil:
		return 0, true
	case uint64(f)+uint64(size) > wrap && b.fits(0, size):
		return 0, true
	case b.fits(f, size):
		return f, true
	case b.fits(0, size):
		return 0, true
	}
	best, ok := uint32(0), false
	for _, a := range b.arcs {
		if b.fits(a.end, size) && (!ok || a.end < best) {
			best, ok = a.end, true
		}
	}
	if p := b.pend; p != nil && b.fits(p.ext.pos+p.ext.size, size) && (!ok || p.ext.pos+p.ext.size < best) {
		best, ok = p.ext.pos+p.ext.size, true
	}
	return best, ok
}

// took records that [pos, pos+size) was allocated.
func (b *backing) took(pos, size uint32) { b.frontier = pos + size }

// retain adds the extent of the newest event.
func (b *backing) retain(e extent) {
	b.live += e.size
	if n := len(b.arcs); n > 0 && b.arcs[n-1].end == e.pos {
		b.arcs[n-1].end += e.size
		return
	}
	b.arcs = append(b.arcs, arc{e.pos, e.pos + e.size})
}

// release frees the extent of the oldest event.
func (b *backing) release(e extent) {
	b.live -= e.size
	a := &b.arcs[0]
	if a.start != e.pos {
		panic(fmt.Sprintf("replay: evicting the record at %d, the oldest arc starts at %d", e.pos, a.start))
	}
	a.start += e.size
	if a.start == a.end {
		b.arcs = append(b.arcs[:0], b.arcs[1:]...)
	}
}

// encodeExit and the others store payloads as little endian integers
// followed by strings with 16-bit lengths.
func encodeExit(dst []byte, x *ExitInfo) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(int64(x.Code)))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(int64(x.Signal)))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(x.Duration))
	return appendString(dst, x.Reason)
}

func decodeExit(p []byte) *ExitInfo {
	d := decoder{p: p}
	x := &ExitInfo{Code: int(int64(d.u64())), Signal: int(int64(d.u64())), Duration: time.Duration(d.u64())}
	x.Reason = d.str()
	return x
}

func encodeNotice(dst []byte, n *NoticeInfo) []byte {
	var at uint64
	zero := byte(1)
	if !n.At.IsZero() {
		at, zero = uint64(n.At.UnixNano()), 0
	}
	dst = append(binary.LittleEndian.AppendUint64(dst, at), zero)
	return appendString(appendString(dst, n.Reason), n.Message)
}

func decodeNotice(p []byte) *NoticeInfo {
	d := decoder{p: p}
	at, zero := d.u64(), d.byte()
	n := &NoticeInfo{Reason: d.str()}
	n.Message = d.str()
	if zero == 0 {
		n.At = time.Unix(0, int64(at))
	}
	return n
}

func appendString(dst []byte, s string) []byte {
	return append(binary.LittleEndian.AppendUint16(dst, uint16(len(s))), s...)
}

// decoder reads a payload that a CRC vouched for; a short one yields zeros.
type decoder struct{ p []byte }

func (d *decoder) u64() uint64 {
	if len(d.p) < 8 {
		d.p = nil
		return 0
	}
	v := binary.LittleEndian.Uint64(d.p)
	d.p = d.p[8:]
	return v
}

func (d *decoder) byte() byte {
	if len(d.p) < 1 {
		return 0
	}
	v := d.p[0]
	d.p = d.p[1:]
	return v
}

func (d *decoder) str() string {
	if len(d.p) < 2 {
		d.p = nil
		return ""
	}
	n := int(binary.LittleEndian.Uint16(d.p))
	d.p = d.p[2:]
	n = min(n, len(d.p))
	s := string(d.p[:n])
	d.p = d.p[n:]
	return s
}

// payloadOf encodes the payload of a control event, nil for none.
func payloadOf(ev *Event) ([]byte, error) {
	var p []byte
	switch {
	case ev.Exit != nil:
		p = encodeExit(nil, ev.Exit)
	case ev.Notice != nil:
		p = encodeNotice(nil, ev.Notice)
	default:
		return nil, nil
	}
	if len(p) > MaxPayload {
		return nil, invalid(ev.Kind, fmt.Sprintf("text of %d bytes, a backed ring keeps at most %d", len(p), MaxPayload))
	}
	return p, nil
}
