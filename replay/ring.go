package replay

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Default bounds of a ring, used for zero Config fields.
const (
	DefaultMaxBytes  = 1 << 20 // DefaultMaxBytes is the default bound on retained output bytes.
	DefaultMaxEvents = 4096    // DefaultMaxEvents is the default bound on retained events.
)

// initialSlots is the first capacity of the event slice. It is small
// because most rings of a busy server are idle, with a started event and
// a prompt or two: the slice doubles as events arrive, up to MaxEvents.
const initialSlots = 4

var (
	// ErrClosed is returned by Append after the exit event, including for a
	// second exit.
	ErrClosed = errors.New("replay: ring is closed")
	// ErrInvalid is returned by Append for an event the ring cannot record:
	// an unknown kind, a sequence set by the caller, output without a stream
	// or without data, or fields that belong to another kind.
	ErrInvalid = errors.New("replay: invalid event")
)

// Config bounds a ring. Zero or negative fields take the defaults.
type Config struct {
	MaxBytes  int `json:"max_bytes"`  // sum of len(Data) retained; default DefaultMaxBytes
	MaxEvents int `json:"max_events"` // events retained; default DefaultMaxEvents
	// Memory, when set, holds the ring's events instead of the Go heap, so
	// that Recover can rebuild the ring from it after the writer died (see
	// backed.go): usually a MAP_SHARED mapping of a file on tmpfs. Its
	// length is MemorySize(cfg); New lays out a fresh ring in it whatever it
	// held, Recover reads the ring a previous writer left.
	Memory []byte `json:"-"`
}

// normal returns c with the defaults in place of zero bounds.
func (c Config) normal() Config {
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxEvents <= 0 {
		c.MaxEvents = DefaultMaxEvents
	}
	return c
}

// Ring is the bounded event log of one execution. Create it with New. All
// methods are safe for concurrent use; none waits for a reader. Output is
// kept in reused slabs (see slab.go).
type Ring struct {
	maxBytes  int
	maxEvents int
	slabMax   int

	mu     sync.Mutex
	slots  []slot // circular: slots[head] is the oldest retained event
	head   int
	n      int    // retained events
	last   uint64 // sequence of the newest event, and so the number appended
	offset [StreamStderr + 1]uint64
	closed bool
	// wake is closed by the next Append. Allocated only when a reader has to
	// wait, so appends to a ring nobody follows cost nothing extra.
	wake chan struct{}
	// notified are the cursors armed by Notify; firing are their callbacks
	// that the next Append took, called once the lock is released.
	notified []*Cursor
	firing   []func()

	outputBytes  uint64 // output bytes ever appended
	evictedBytes uint64 // output bytes evicted
	forcedBytes  uint64 // output bytes evicted although held (beyond twice the bounds)

	onEvict func(Event) // see OnEvict

	holds    []*Hold       // see hold.go
	floor    uint64        // the lowest acknowledged sequence of holds, while pinned
	unpinned bool          // Unpin was called: holds restrict nothing
	room     chan struct{} // closed by the next change of holds; nil until a writer waits

	cur   *slab // where output is copied; nil until the first output
	spare *slab // a free full-size slab, reused before allocating

	b     *backing                // the events of a backed ring (Config.Memory); nil in memory
	resv  *memReservation         // an outstanding Reserve of a ring in memory
	words [numWords]atomic.Uint64 // Word of a ring in memory
}

// slot is a retained event and the slab its Data is in (nil if none).
// end is the output bytes appended up to and including the event, so
// that what a reader has seen is known in constant time.
type slot struct {
	ev   Event
	slab *slab
	end  uint64
}

// New returns an empty ring bounded by cfg. It allocates nothing for
// events until the first Append. With cfg.Memory it lays out a fresh
// backed ring there; it panics when that memory is not MemorySize(cfg)
// bytes long or not 8-byte aligned, or the bounds need more than 4 GiB.
func New(cfg Config) *Ring {
	cfg = cfg.normal()
	r := &Ring{maxBytes: cfg.MaxBytes, maxEvents: cfg.MaxEvents, slabMax: slabLimit(cfg.MaxBytes)}
	if cfg.Memory != nil {
		r.b = newBacking(cfg.Memory, layoutOf(cfg))
	}
	return r
}

// Append records ev and returns its sequence number. The ring sets Seq,
// the Offset of output, and Time when it is zero; it copies Data, Exit and
// Notice, so the caller may reuse them. To stay within its bounds it
// evicts the oldest events, but never the one just appended: an output
// larger than MaxBytes is kept alone. Append never blocks on readers.
//
// A backed ring records output longer than MaxReserve as consecutive
// events of at most MaxReserve bytes and returns the last one's sequence,
// and refuses an exit or notice whose text exceeds MaxPayload.
func (r *Ring) Append(ev Event) (uint64, error) {
	if err := ev.check(); err != nil {
		return 0, err
	}
	if ev.Exit != nil {
		exit := *ev.Exit
		ev.Exit = &exit
	}
	if ev.Notice != nil {
		notice := *ev.Notice
		ev.Notice = &notice
	}
	r.mu.Lock()
	defer r.unlock()
	if ev.Kind == KindOutput {
		return r.outputLocked(&ev)
	}
	return r.appendLocked(&ev)
}

// AppendOutput records output p of stream s. It is the hot path, and the
// same as Append(Event{Kind: KindOutput, Stream: s, Data: p}).
func (r *Ring) AppendOutput(s Stream, p []byte) (uint64, error) {
	if !s.valid() || len(p) == 0 {
		return 0, invalid(KindOutput, "needs a stream and data")
	}
	ev := Event{Kind: KindOutput, Stream: s, Data: p}
	r.mu.Lock()
	defer r.unlock()
	return r.outputLocked(&ev)
}

// outputLocked appends the output ev, in pieces of at most MaxReserve
// bytes in a backed ring.
func (r *Ring) outputLocked(ev *Event) (uint64, error) {
	if r.b == nil {
		return r.appendLocked(ev)
	}
	data := ev.Data
	for len(data) > MaxReserve {
		piece := *ev
		piece.Data = data[:MaxReserve]
		if _, err := r.appendLocked(&piece); err != nil {
			return 0, err
		}
		data = data[MaxReserve:]
	}
	ev.Data = data
	return r.appendLocked(ev)
}

// appendLocked appends ev, whose Data is still the caller's.
func (r *Ring) appendLocked(ev *Event) (uint64, error) {
	if r.closed {
		return 0, ErrClosed
	}
	var payload []byte
	if r.b != nil {
		var err error
		if payload, err = payloadOf(ev); err != nil {
			return 0, err
		}
	}
	ev.Seq = r.last + 1
	if ev.Time.IsZero() {
		// Stamped under the lock so that Time never goes backwards along Seq.
		ev.Time = time.Now()
	}
	if r.b != nil {
		r.makeRoom(len(ev.Data))
		r.storeBacked(ev, payload)
		r.appended(ev.Kind)
	} else {
		// In memory the new output is stored first, so that slabs the
		// eviction frees become the spare, not the current slab.
		r.makeRoomEvents(len(ev.Data))
		r.storeMemory(ev)
		r.last++
		r.closed = ev.Kind == KindExit
		for r.n > 1 && r.retainedBytes() > uint64(r.maxBytes) && r.evictable(r.n, 0) {
			r.evictOldest()
		}
		r.woken()
	}
	return ev.Seq, nil
}

// makeRoom evicts what an append of an event with n bytes of output must
// evict to stay within the bounds (unless holds keep it), before it is
// stored: by events, then by bytes, never making room for more than one
// event. A backed ring must: the new event may take the old ones' memory.
func (r *Ring) makeRoom(n int) {
	r.makeRoomEvents(n)
	for r.n > 0 && r.retainedBytes()+uint64(n) > uint64(r.maxBytes) && r.evictable(r.n+1, n) {
		r.evictOldest()
	}
}

// makeRoomEvents evicts the oldest events while the ring holds MaxEvents
// (unless a hold keeps them: after holds kept more, this returns the ring
// to its bound).
func (r *Ring) makeRoomEvents(n int) {
	for r.n >= r.maxEvents && r.evictable(r.n+1, n) {
		r.evictOldest()
	}
}

// storeMemory stores ev, numbered, as the newest event of a ring in memory.
func (r *Ring) storeMemory(ev *Event) {
	sl := slot{ev: *ev}
	sl.ev.Offset = 0
	if ev.Kind == KindOutput {
		r.output(&sl)
	}
	sl.end = r.outputBytes
	r.push(sl)
}

// appended counts the event just stored, which has its slot, and wakes
// whoever waits.
func (r *Ring) appended(k Kind) {
	r.last++
	r.closed = k == KindExit
	r.woken()
}

// woken wakes the readers waiting for an event, and the writers waiting
// for room if there is some now.
func (r *Ring) woken() {
	if r.wake != nil {
		close(r.wake)
		r.wake = nil
	}
	r.takeNotified()
	if r.room != nil && !r.fullLocked() {
		// The exit, or the hard ceiling evicting held output, made room.
		close(r.room)
		r.room = nil
	}
}

// output copies the caller's Data into ring memory and gives the event its
// stream offset. The copy is made under the lock, but into warm memory,
// so it takes well under a microsecond.
func (r *Ring) output(sl *slot) {
	ev := &sl.ev
	ev.Data, sl.slab = r.store(ev.Data)
	ev.Offset = r.offset[ev.Stream]
	r.offset[ev.Stream] += uint64(len(ev.Data))
	r.outputBytes += uint64(len(ev.Data))
}

// push stores sl as the newest event (makeRoom evicted what had to go),
// growing the slot slice when it is full.
func (r *Ring) push(sl slot) {
	if r.n == len(r.slots) {
		r.slots, r.head = grown(r.slots, r.head, r.n, r.maxEvents), 0
	}
	r.slots[r.index(r.n)] = sl
	r.n++
}

// grown returns a larger copy of the circular slice s, whose n elements
// start at head, the oldest first.
func grown[T any](s []T, head, n, maxEvents int) []T {
	limit := maxEvents
	if n >= limit {
		limit = 2 * maxEvents // holds keep more than MaxEvents; see evictable
	}
	bigger := make([]T, min(max(2*len(s), initialSlots), limit))
	for k := range n {
		j := head + k
		if j >= len(s) {
			j -= len(s)
		}
		bigger[k] = s[j]
	}
	return bigger
}

func (r *Ring) evictOldest() {
	if r.b != nil {
		r.evictBacked()
		return
	}
	old := &r.slots[r.head]
	if r.onEvict != nil {
		r.onEvict(old.ev)
	}
	r.evictedBytes += uint64(len(old.ev.Data))
	if r.pinned() && old.ev.Seq > r.floor {
		r.forcedBytes += uint64(len(old.ev.Data))
	}
	if s := old.slab; s != nil {
		s.events--
		r.recycle(s)
	}
	*old = slot{} // drop the pointers, for the collector
	r.head = r.index(1)
	r.n--
}

// index maps the i-th retained event (0 is the oldest) to its slot.
func (r *Ring) index(i int) int {
	size := len(r.slots)
	if r.b != nil {
		size = len(r.b.ext)
	}
	if j := r.head + i; j < size {
		return j
	}
	return r.head + i - size
}

// appendEvents appends the retained events i up to i+n (exclusive) to dst.
// A backed ring copies their Data to buf, or to fresh memory when buf is
// nil, and returns buf.
func (r *Ring) appendEvents(dst []Event, i, n int, buf []byte) ([]Event, []byte) {
	dst = slices.Grow(dst, n)
	if r.b == nil {
		for k := range n {
			dst = append(dst, r.slots[r.index(i+k)].ev)
		}
		return dst, buf
	}
	total := 0
	for k := range n {
		total += r.dataLen(i + k)
	}
	if buf == nil {
		buf = make([]byte, 0, total)
	}
	buf = slices.Grow(buf, total)
	for k := range n {
		dst = append(dst, r.b.event(r.b.ext[r.index(i+k)].pos, &buf))
	}
	return dst, buf
}

// dataLen returns the output bytes of the i-th retained event.
func (r *Ring) dataLen(i int) int {
	if r.b == nil {
		return len(r.slots[r.index(i)].ev.Data)
	}
	rc := r.b.get(r.b.ext[r.index(i)].pos)
	return rc.dataLen()
}

// endAt returns the output bytes appended up to and including the i-th
// retained event.
func (r *Ring) endAt(i int) uint64 {
	if r.b == nil {
		return r.slots[r.index(i)].end
	}
	rc := r.b.get(r.b.ext[r.index(i)].pos)
	return rc.total()
}

func (r *Ring) retainedBytes() uint64 { return r.outputBytes - r.evictedBytes }

// cumThrough returns the output bytes appended up to and including seq,
// exact from the event before the oldest retained one on; for an older
// seq it returns the evicted bytes, an upper bound.
func (r *Ring) cumThrough(seq uint64) uint64 {
	switch first := r.first(); {
	case seq == 0:
		return 0
	case seq >= r.last:
		return r.outputBytes
	case seq+1 <= first:
		return r.evictedBytes
	default:
		return r.endAt(int(seq - first))
	}
}

// first returns the sequence of the oldest retained event; last+1 when
// the ring is empty.
func (r *Ring) first() uint64 { return r.last - uint64(r.n) + 1 }

// Gap reports history a reader asked for that the ring no longer holds.
// The reader continues at To; Bytes says how much output it lost, and the
// Offsets of the output that follows say exactly where each stream
// resumes.
type Gap struct {
	From  uint64 `json:"from"`  // first missing sequence (the reader's after+1)
	To    uint64 `json:"to"`    // first sequence still available
	Bytes uint64 `json:"bytes"` // output bytes in the missing events; see Read and Cursor
	// Inexact marks a Bytes that is an upper bound: the reader's position
	// was evicted and it did not say how much output it had seen.
	Inexact bool `json:"inexact,omitempty"`
}

// Read returns the events with Seq > after, appended to dst[:0]: at most
// max of them (no limit when max <= 0) and at most maxBytes of Data in
// total (no limit when maxBytes <= 0), but always at least one when any is
// available. When after+1 has been evicted it returns no events and a gap;
// the caller continues with Read(dst, gap.To-1, ...). When nothing is newer
// than after, including an after from the future, it returns no events and
// no gap.
//
// The Data of the events stays valid for as long as the caller keeps it
// (the ring never reuses memory that Read handed out), which makes Read
// costlier for the writer than a Cursor. Read copies the events while
// holding the ring's lock: give it a max when the ring may hold many.
//
// The gap's Bytes is exact when after is 0. Otherwise the ring no longer
// knows how much output preceded after, because remembering that for every
// evicted event would make it unbounded, so Bytes counts all evicted
// output: an upper bound, marked Inexact. A Cursor keeps track and is
// exact, and so is one made by CursorSeen with what the reader counted.
func (r *Ring) Read(dst []Event, after uint64, max, maxBytes int) ([]Event, *Gap) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, n, gap := r.span(after, 0, after > 0, max, maxBytes)
	r.eachSlab(i, n, func(s *slab) { s.pinned = true })
	evs, _ := r.appendEvents(dst[:0], i, n, nil)
	return evs, gap
}

// span locates what a reader after after gets: n retained events from the
// i-th, or a gap. seen is the output bytes up to and including after as
// far as the reader knows, for the gap's Bytes; guess says it does not
// know (seen is then a lower bound).
func (r *Ring) span(after, seen uint64, guess bool, max, maxBytes int) (i, n int, gap *Gap) {
	if after >= r.last {
		return 0, 0, nil
	}
	if first := r.first(); after+1 < first {
		return 0, 0, &Gap{From: after + 1, To: first, Bytes: r.evictedBytes - min(seen, r.evictedBytes), Inexact: guess}
	}
	i = int(after + 1 - r.first())
	return i, r.batchLen(i, max, maxBytes), nil
}

// batchLen counts the events from the i-th retained one that fit max and
// maxBytes, at least one.
func (r *Ring) batchLen(i, max, maxBytes int) int {
	n := r.n - i
	if max > 0 {
		n = min(n, max)
	}
	if maxBytes <= 0 {
		return n
	}
	total := 0
	for k := range n {
		total += r.dataLen(i + k)
		if total > maxBytes && k > 0 {
			return k
		}
	}
	return n
}

// OnEvict makes f see every event the ring evicts, oldest first, as it
// evicts it: a reader that must know all history (a terminal's state)
// follows what falls out of the ring. f runs with the ring locked, so it
// must be quick and must not call the ring; the event's Data is valid
// only during the call. Set it before the first Append.
func (r *Ring) OnEvict(f func(Event)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onEvict = f
}

// OutputThrough returns the output bytes appended up to and including
// sequence seq, and whether the ring knows: it does not for a seq older
// than the event before the oldest retained one.
func (r *Ring) OutputThrough(seq uint64) (uint64, bool) { return r.seenThrough(seq) }

// Bounds returns the first and last retained sequence numbers, or 0, 0
// when nothing was appended.
func (r *Ring) Bounds() (first, last uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == 0 {
		return 0, 0
	}
	return r.first(), r.last
}

// Closed reports whether the exit event was appended.
func (r *Ring) Closed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// Stats describes a ring's contents and history.
type Stats struct {
	Bytes        int    `json:"bytes"`         // output bytes retained
	Events       int    `json:"events"`        // events retained
	Appended     uint64 `json:"appended"`      // events ever appended
	OutputBytes  uint64 `json:"output_bytes"`  // output bytes ever appended
	EvictedBytes uint64 `json:"evicted_bytes"` // output bytes evicted
	// HeldBytes is the retained output after the holds' lowest
	// acknowledged sequence: what the ring may not evict. ForcedBytes is
	// held output evicted anyway, beyond twice the bounds; it no longer
	// counts as held.
	HeldBytes   uint64 `json:"held_bytes"`
	Holds       int    `json:"holds"`
	ForcedBytes uint64 `json:"forced_bytes"`
}

// Stats returns the ring's current Stats.
func (r *Ring) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Stats{
		Bytes: int(r.retainedBytes()), Events: r.n, Appended: r.last,
		OutputBytes: r.outputBytes, EvictedBytes: r.evictedBytes,
		Holds: len(r.holds), ForcedBytes: r.forcedBytes,
	}
	if r.pinned() {
		st.HeldBytes = r.outputBytes - r.cumThrough(r.heldFrom())
	}
	return st
}
