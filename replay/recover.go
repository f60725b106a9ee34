package replay

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Recover rebuilds the backed ring that a previous writer left in
// cfg.Memory, whether it closed it, stopped, or died at any instruction:
// the same events with the same sequences, stream offsets, kinds, times
// and data, and the same Word values. An event being appended when the
// writer died is there if it was published (its commit stored) and gone
// otherwise; an outstanding reservation is resolved as Reserve says.
// Holds, OnEvict and forced-eviction counts do not survive.
//
// It returns an error wrapping ErrCorrupt for memory that holds no ring,
// one made with other bounds or another layout version, or one whose
// published records fail their checks; the memory is left as it was.
func Recover(cfg Config) (*Ring, error) {
	cfg = cfg.normal()
	l := layoutOf(cfg)
	if err := checkHeader(cfg.Memory, l); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	r := &Ring{maxBytes: l.maxBytes, maxEvents: l.maxEvents, slabMax: slabLimit(l.maxBytes)}
	r.b = &backing{mem: cfg.Memory, log: cfg.Memory[hdrSize:], soft: uint32(l.soft), lastPos: noPos}
	if err := r.rebuild(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return r, nil
}

// checkHeader checks that mem holds a ring of layout l.
func checkHeader(mem []byte, l layout) error {
	if len(mem) < hdrSize {
		return fmt.Errorf("replay: memory of %d bytes holds no ring", len(mem))
	}
	le := binary.LittleEndian
	switch {
	case !bytes.Equal(mem[:8], magic[:]):
		return errors.New("replay: memory holds no ring (no magic)")
	case le.Uint32(mem[offVersion:]) != layoutVersion:
		return fmt.Errorf("replay: ring layout version %d, this build reads %d", le.Uint32(mem[offVersion:]), layoutVersion)
	case le.Uint32(mem[offHdrCRC:]) != headerSum(mem):
		return errors.New("replay: ring header CRC mismatch")
	}
	mb, me := le.Uint64(mem[offMaxBytes:]), le.Uint64(mem[offMaxEvents:])
	if mb != uint64(l.maxBytes) || me != uint64(l.maxEvents) || le.Uint64(mem[offLogCap:]) != uint64(l.logCap) {
		return fmt.Errorf("replay: ring made with max_bytes %d and max_events %d, recovered with %d and %d", mb, me, l.maxBytes, l.maxEvents)
	}
	return memoryError(mem, l)
}

// rebuild reads the published state, resolves a reservation, and walks
// the records back from the newest to the oldest retained.
func (r *Ring) rebuild() error {
	b := r.b
	b.sel = b.word(offSel).Load()
	if b.sel > 1 {
		return fmt.Errorf("first block selector %d", b.sel)
	}
	off := offFirst + firstBlock*int(b.sel)
	first := b.word(off).Load()
	var base [3]uint64
	for i := range base {
		base[i] = b.word(off + 8 + 8*i).Load()
	}
	commit := b.word(offCommit).Load()
	if first == 0 || first > commit+1 || commit-first+1 > 2*uint64(r.maxEvents) {
		return fmt.Errorf("oldest sequence %d, newest %d", first, commit)
	}
	exts, last, err := b.walk(first, commit, base)
	if err != nil {
		return err
	}
	if commit, err = b.settle(commit, first, &exts, &last, base); err != nil {
		return err
	}
	b.word(offIntent).Store(0)
	r.restore(commit, exts, last, base)
	return nil
}

// walk checks the records of first..commit, following prev from the
// newest, and returns their extents oldest first and the newest record.
func (b *backing) walk(first, commit uint64, base [3]uint64) ([]extent, record, error) {
	if commit < first {
		return nil, record{ends: base}, nil
	}
	pos := uint32(b.word(offLastPos).Load())
	rc, err := b.check(pos)
	if err == nil && rc.seq == commit+1 {
		// lastPos moved on to an event whose commit was never stored.
		pos = rc.prev
		rc, err = b.check(pos)
	}
	if err != nil {
		return nil, record{}, err
	}
	newest := rc
	exts := make([]extent, commit-first+1)
	for seq := commit; ; seq-- {
		if rc.seq != seq {
			return nil, record{}, fmt.Errorf("record at %d has sequence %d, expected %d", pos, rc.seq, seq)
		}
		exts[seq-first] = extent{pos, uint32(recSize + align8(int(rc.len)))}
		before := rc.ends
		if rc.kind == KindOutput {
			before[rc.stream-1] -= uint64(rc.len)
		}
		if seq == first {
			if before != base {
				return nil, record{}, fmt.Errorf("oldest record %d starts its streams at %v, expected %v", seq, before, base)
			}
			return exts, newest, nil
		}
		pos = rc.prev
		prev, err := b.check(pos)
		if err != nil {
			return nil, record{}, err
		}
		if prev.ends != before {
			return nil, record{}, fmt.Errorf("record %d ends its streams at %v, its successor starts at %v", seq-1, prev.ends, before)
		}
		rc = prev
	}
}

// settle resolves an outstanding reservation: when its read happened, it
// writes and publishes its record, and returns the new commit.
func (b *backing) settle(commit, first uint64, exts *[]extent, last *record, base [3]uint64) (uint64, error) {
	// Intent is the sequence the reservation would get, moved on by each
	// append before its commit is stored: beyond commit exactly while a
	// reservation is outstanding (a committed one leaves its own sequence).
	if intent := b.word(offIntent).Load(); intent <= commit {
		return commit, nil
	} else if intent > commit+2 {
		return 0, fmt.Errorf("reservation for sequence %d, newest is %d", intent, commit)
	}
	n, err := b.reservedRead()
	if err != nil || n == 0 {
		return commit, err // nothing was read
	}
	ends := base
	prev := uint32(noPos)
	t := int64(b.word(offIntentT).Load())
	if commit >= first {
		ends, prev, t = last.ends, (*exts)[len(*exts)-1].pos, max(t, last.time)
	}
	s := Stream(b.word(offIntentStr).Load())
	pos := b.word(offIntentPos).Load()
	ends[s-1] += n
	rc := record{seq: commit + 1, time: t, ends: ends, prev: prev, len: uint32(n), kind: KindOutput, stream: s}
	b.put(uint32(pos), &rc)
	b.word(offLastPos).Store(pos)
	b.word(offCommit).Store(commit + 1)
	*exts = append(*exts, extent{uint32(pos), uint32(recSize + align8(int(n)))})
	*last = rc
	return commit + 1, nil
}

// reservedRead returns how many bytes of the outstanding reservation were
// read: its earlier pieces, and the last one when its read overwrote the
// canary; all that Commit said once it began.
func (b *backing) reservedRead() (uint64, error) {
	raw := b.word(offIntentLen).Load()
	done := raw&intentDone != 0
	off, k := raw>>32&^(intentDone>>32), raw&math.MaxUint32
	pos := b.word(offIntentPos).Load()
	s := Stream(b.word(offIntentStr).Load())
	if off+k > MaxReserve || pos%8 != 0 || pos+recSize+off+k > uint64(len(b.log)) || !s.valid() || (done && off != 0) {
		return 0, fmt.Errorf("reservation of %d+%d bytes (done %v) of stream %d at %d", off, k, done, s, pos)
	}
	if done || k == 0 {
		return off + k, nil
	}
	var canary [8]byte
	binary.LittleEndian.PutUint64(canary[:], b.word(offCanary).Load())
	c := min(k, 8)
	piece := b.log[pos+recSize+off : pos+recSize+off+c]
	if bytes.Equal(piece, canary[:c]) {
		return off, nil // the last read never happened
	}
	return off + k, nil
}

// restore sets the ring's state from what rebuild found.
func (r *Ring) restore(commit uint64, exts []extent, last record, base [3]uint64) {
	b := r.b
	r.b.ext = make([]extent, max(len(exts), initialSlots))
	for _, e := range exts {
		b.ext[r.n] = e
		r.n++
		b.retain(e)
	}
	if len(exts) > 0 {
		e := exts[len(exts)-1]
		b.frontier, b.lastPos = e.pos+e.size, e.pos
	}
	r.last = commit
	r.offset[StreamPTY], r.offset[StreamStdout], r.offset[StreamStderr] = last.ends[0], last.ends[1], last.ends[2]
	r.outputBytes = last.total()
	r.evictedBytes = base[0] + base[1] + base[2]
	r.closed = len(exts) > 0 && last.kind == KindExit
}
