package replay

import (
	"errors"
	"slices"
	"sync"
	"time"
)

// Default bounds of a ring, used for zero Config fields.
const (
	DefaultMaxBytes  = 1 << 20 // DefaultMaxBytes is the default bound on retained output bytes.
	DefaultMaxEvents = 4096    // DefaultMaxEvents is the default bound on retained events.
)

// initialSlots is the first capacity of the event slice. It is small
// because most rings of a busy server are idle: the slice doubles as
// events arrive, up to MaxEvents.
const initialSlots = 8

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
// events until the first Append.
func New(cfg Config) *Ring {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MaxEvents <= 0 {
		cfg.MaxEvents = DefaultMaxEvents
	}
	return &Ring{maxBytes: cfg.MaxBytes, maxEvents: cfg.MaxEvents, slabMax: slabLimit(cfg.MaxBytes)}
}

// Append records ev and returns its sequence number. The ring sets Seq,
// the Offset of output, and Time when it is zero; it copies Data, Exit and
// Notice, so the caller may reuse them. To stay within its bounds it
// evicts the oldest events, but never the one just appended: an output
// larger than MaxBytes is kept alone. Append never blocks on readers.
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
	defer r.mu.Unlock()
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
	defer r.mu.Unlock()
	return r.appendLocked(&ev)
}

// appendLocked appends ev, whose Data is still the caller's.
func (r *Ring) appendLocked(ev *Event) (uint64, error) {
	if r.closed {
		return 0, ErrClosed
	}
	r.last++
	ev.Seq = r.last
	if ev.Time.IsZero() {
		// Stamped under the lock so that Time never goes backwards along Seq.
		ev.Time = time.Now()
	}
	sl := slot{ev: *ev}
	sl.ev.Offset = 0
	if ev.Kind == KindOutput {
		r.output(&sl)
	}
	sl.end = r.outputBytes
	r.closed = ev.Kind == KindExit
	r.push(sl)
	for r.n > 1 && r.retainedBytes() > uint64(r.maxBytes) && r.evictable(r.n) {
		r.evictOldest()
	}
	if r.wake != nil {
		close(r.wake)
		r.wake = nil
	}
	if r.room != nil && !r.fullLocked() {
		// The exit, or the hard ceiling evicting held output, made room.
		close(r.room)
		r.room = nil
	}
	return ev.Seq, nil
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

// push stores sl as the newest event, first evicting the oldest events
// while the ring holds MaxEvents (unless a hold keeps them: after holds
// kept more, this returns the ring to its bound), and growing the slot
// slice when it is full.
func (r *Ring) push(sl slot) {
	for r.n >= r.maxEvents && r.evictable(r.n+1) {
		r.evictOldest()
	}
	if r.n == len(r.slots) {
		r.grow()
	}
	r.slots[r.index(r.n)] = sl
	r.n++
}

func (r *Ring) grow() {
	limit := r.maxEvents
	if r.n >= limit {
		limit = 2 * r.maxEvents // holds keep more than MaxEvents; see evictable
	}
	slots := make([]slot, min(max(2*len(r.slots), initialSlots), limit))
	for k := range r.n {
		slots[k] = r.slots[r.index(k)]
	}
	r.slots, r.head = slots, 0
}

func (r *Ring) evictOldest() {
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
	if j := r.head + i; j < len(r.slots) {
		return j
	}
	return r.head + i - len(r.slots)
}

// appendEvents appends the retained events i up to i+n (exclusive) to dst.
func (r *Ring) appendEvents(dst []Event, i, n int) []Event {
	dst = slices.Grow(dst, n)
	for k := range n {
		dst = append(dst, r.slots[r.index(i+k)].ev)
	}
	return dst
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
		return r.slots[r.index(int(seq-first))].end
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
	return r.appendEvents(dst[:0], i, n), gap
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
		total += len(r.slots[r.index(i+k)].ev.Data)
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
