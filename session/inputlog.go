package session

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// inputLog is a durable execution's input file: the input accepted from
// clients and not yet written to the program, in a circular buffer the
// size of the input queue, and two offsets. A client's input is
// acknowledged once accepted, so a restarted supervisor must write what
// was accepted and not yet written, and nothing twice: it resumes at the
// written offset with the bytes up to the accepted one.
//
// The one input that can still be written twice is a piece the program
// was being written when the supervisor was killed, between the write
// returning and the offset's store: pieces are at most inputPiece bytes.
// The offset a piece is being written to is stored before the write, so a
// restarted supervisor knows when a kill landed there (inFlight), writes
// the piece again (the program may have it, or not) and says so.
type inputLog struct {
	mem      []byte
	data     []byte
	accepted *atomic.Uint64 // input offset received
	written  *atomic.Uint64 // input offset written to the program
	writing  *atomic.Uint64 // the end of the piece being written, stored before the write
	// unlaid: the header is not written yet (no input accepted), nor read:
	// the file may still be a hole, which a read through the mapping would
	// give a page. Set and cleared under the input queue's lock.
	unlaid bool
}

// Input file layout: a 64-byte header (magic, accepted, written, size,
// writing), then the data. A file of before writing has 0 there.
//
// The header is written with the first input accepted, not before: an
// execution that never gets any (most pipes, a shell nobody types in)
// then never touches the file, which stays a hole and costs no page of
// memory. A header of zeros reads as a log that had no input.
const (
	inputMagic  = 0x74676970_6e707431 // "tgipnpt1"
	inputHeader = 64
	inputPiece  = 1024
)

func inputLogSize(buffer int) int { return inputHeader + buffer }

// newInputLog binds a fresh input file in mem, whose header its first
// accept writes.
func newInputLog(mem []byte) *inputLog {
	l := bindInputLog(mem)
	l.unlaid = true
	return l
}

// magic is the header's first word, 0 until the first accept.
func (l *inputLog) magic() *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&l.mem[0])) }

// lay writes the header of a log that had no input yet: its size, then
// the magic that makes it count.
func (l *inputLog) lay() {
	binary.LittleEndian.PutUint64(l.mem[24:], uint64(len(l.data)))
	l.magic().Store(inputMagic)
	l.unlaid = false
}

// acceptedAt is the input offset accepted, 0 before any input.
func (l *inputLog) acceptedAt() uint64 {
	if l.unlaid {
		return 0
	}
	return l.accepted.Load()
}

func bindInputLog(mem []byte) *inputLog {
	return &inputLog{
		mem: mem, data: mem[inputHeader:],
		accepted: (*atomic.Uint64)(unsafe.Pointer(&mem[8])),
		written:  (*atomic.Uint64)(unsafe.Pointer(&mem[16])),
		writing:  (*atomic.Uint64)(unsafe.Pointer(&mem[32])),
	}
}

// openInputLog reads an input file an earlier supervisor left: the
// offsets, and the input accepted but not written.
func openInputLog(mem []byte) (*inputLog, []byte, error) {
	if len(mem) < inputHeader {
		return nil, nil, fmt.Errorf("session: input file: not an input file of %d bytes", len(mem))
	}
	if !slices.ContainsFunc(mem[:inputHeader], func(b byte) bool { return b != 0 }) {
		return newInputLog(mem), nil, nil // no input yet: the first accept lays the header
	}
	l := bindInputLog(mem)
	if l.magic().Load() != inputMagic || binary.LittleEndian.Uint64(mem[24:]) != uint64(len(mem)-inputHeader) {
		return nil, nil, fmt.Errorf("session: input file: not an input file of %d bytes", len(mem))
	}
	acc, wr := l.accepted.Load(), l.written.Load()
	if wr > acc || acc-wr > uint64(len(l.data)) {
		return nil, nil, fmt.Errorf("session: input file: offsets %d written, %d accepted are inconsistent", wr, acc)
	}
	pending := make([]byte, acc-wr)
	for i := range pending {
		pending[i] = l.data[(wr+uint64(i))%uint64(len(l.data))]
	}
	return l, pending, nil
}

// reopenInputLog is openInputLog of dir's input file, mapped at mem. A
// file that holds no block never had input: its header is not read,
// which would make the kernel give the hole a page.
func reopenInputLog(dir string, mem []byte) (*inputLog, []byte, error) {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "input"), &st); err == nil && st.Blocks == 0 {
		return newInputLog(mem), nil, nil
	}
	return openInputLog(mem)
}

// accept stores p, the input from offset at on, then publishes it.
func (l *inputLog) accept(at uint64, p []byte) {
	if l.unlaid {
		l.lay()
	}
	n := uint64(len(l.data))
	for len(p) > 0 {
		pos := at % n
		c := copy(l.data[pos:], p)
		p, at = p[c:], at+uint64(c)
	}
	l.accepted.Store(at)
}

// beginWrite records that input up to at is being written to the program.
func (l *inputLog) beginWrite(at uint64) { l.writing.Store(at) }

// wrote records the input offset written to the program.
func (l *inputLog) wrote(at uint64) { l.written.Store(at) }

// inFlight is the input a killed supervisor was writing when it died:
// the program may have it or not. 0 when no write was under way.
func (l *inputLog) inFlight() uint64 {
	if l.unlaid {
		return 0
	}
	wr, w := l.written.Load(), l.writing.Load()
	if w <= wr || w-wr > inputPiece {
		return 0
	}
	return w - wr
}
