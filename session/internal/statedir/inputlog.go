package statedir

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// InputLog is a durable execution's input file: the input accepted from
// clients and not yet written to the program, in a circular buffer the
// size of the input queue, and two offsets. A client's input is
// acknowledged once accepted, so a restarted supervisor must write what
// was accepted and not yet written, and nothing twice: it resumes at the
// written offset with the bytes up to the accepted one.
//
// The one input that can still be written twice is a piece the program
// was being written when the supervisor was killed, between the write
// returning and the offset's store: pieces are at most InputPiece bytes.
// The offset a piece is being written to is stored before the write, so a
// restarted supervisor knows when a kill landed there (InFlight), writes
// the piece again (the program may have it, or not) and says so.
type InputLog struct {
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
	// InputPiece is the most input written to the program at once: the
	// most a kill can leave in flight.
	InputPiece = 1024
)

// InputLogSize is the size of the input file of an input queue of
// buffer bytes.
func InputLogSize(buffer int) int { return inputHeader + buffer }

// CreateInput makes the input file of a new execution in dir, for an
// input queue of buffer bytes.
func CreateInput(dir string, buffer int) (*InputLog, error) {
	mem, err := mapFile(dir, "input", InputLogSize(buffer), true)
	if err != nil {
		return nil, err
	}
	l := NewInputLog(mem)
	unmapWith(l, mem)
	return l, nil
}

// ReopenInput maps the input file an earlier supervisor left in dir, for
// an input queue of buffer bytes, and returns it with the input accepted
// and not written (OpenInputLog). A file that holds no block never had
// input: its header is not read, which would make the kernel give the
// hole a page.
func ReopenInput(dir string, buffer int) (*InputLog, []byte, error) {
	mem, err := mapFile(dir, "input", InputLogSize(buffer), false)
	if err != nil {
		return nil, nil, err
	}
	l, pending := NewInputLog(mem), []byte(nil)
	var st unix.Stat_t
	if unix.Stat(filepath.Join(dir, "input"), &st) != nil || st.Blocks != 0 {
		l, pending, err = OpenInputLog(mem)
	}
	if err != nil {
		unix.Munmap(mem)
		return nil, nil, err
	}
	unmapWith(l, mem)
	return l, pending, nil
}

// NewInputLog binds a fresh input file in mem, whose header its first
// accept writes.
func NewInputLog(mem []byte) *InputLog {
	l := bindInputLog(mem)
	l.unlaid = true
	return l
}

// magic is the header's first word, 0 until the first accept.
func (l *InputLog) magic() *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&l.mem[0])) }

// lay writes the header of a log that had no input yet: its size, then
// the magic that makes it count.
func (l *InputLog) lay() {
	binary.LittleEndian.PutUint64(l.mem[24:], uint64(len(l.data)))
	l.magic().Store(inputMagic)
	l.unlaid = false
}

// AcceptedAt is the input offset accepted, 0 before any input.
func (l *InputLog) AcceptedAt() uint64 {
	if l.unlaid {
		return 0
	}
	return l.accepted.Load()
}

func bindInputLog(mem []byte) *InputLog {
	return &InputLog{
		mem: mem, data: mem[inputHeader:],
		accepted: (*atomic.Uint64)(unsafe.Pointer(&mem[8])),
		written:  (*atomic.Uint64)(unsafe.Pointer(&mem[16])),
		writing:  (*atomic.Uint64)(unsafe.Pointer(&mem[32])),
	}
}

// OpenInputLog reads an input file an earlier supervisor left, mapped at
// mem: the offsets, and the input accepted but not written.
func OpenInputLog(mem []byte) (*InputLog, []byte, error) {
	if len(mem) < inputHeader {
		return nil, nil, fmt.Errorf("session: input file: not an input file of %d bytes", len(mem))
	}
	if !slices.ContainsFunc(mem[:inputHeader], func(b byte) bool { return b != 0 }) {
		return NewInputLog(mem), nil, nil // no input yet: the first accept lays the header
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

// Accept stores p, the input from offset at on, then publishes it.
func (l *InputLog) Accept(at uint64, p []byte) {
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

// BeginWrite records that input up to at is being written to the program.
func (l *InputLog) BeginWrite(at uint64) { l.writing.Store(at) }

// Wrote records the input offset written to the program.
func (l *InputLog) Wrote(at uint64) { l.written.Store(at) }

// Written is the input offset written to the program.
func (l *InputLog) Written() uint64 { return l.written.Load() }

// InFlight is the input a killed supervisor was writing when it died:
// the program may have it or not. 0 when no write was under way.
func (l *InputLog) InFlight() uint64 {
	if l.unlaid {
		return 0
	}
	wr, w := l.written.Load(), l.writing.Load()
	if w <= wr || w-wr > InputPiece {
		return 0
	}
	return w - wr
}
