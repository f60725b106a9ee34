package session

import (
	"bytes"
	"sync/atomic"
	"testing"

	"github.com/termgate/termgate/session/internal/statedir"
	"golang.org/x/sys/unix"
)

// killedWriter stands for a supervisor killed inside a write: the bytes
// may or may not have reached the program.
type killedWriter struct{ got bytes.Buffer }

func (w *killedWriter) Write(p []byte) (int, error) { w.got.Write(p); panic("killed") }

// TestInputLogKnowsAWriteInFlight: a supervisor killed while writing a
// piece leaves the piece's end stored, so the next one knows the piece
// may already be with the program, and how large it is; one killed
// between writes leaves no doubt.
func TestInputLogKnowsAWriteInFlight(t *testing.T) {
	t.Parallel()
	mem := make([]byte, statedir.InputLogSize(4096))
	q := newInputQueue(4096, new(atomic.Uint64))
	q.log = statedir.NewInputLog(mem)
	if _, err := q.write(0, []byte("first\n")); err != nil {
		t.Fatal(err)
	}
	q.writeOut(&bytes.Buffer{}, []byte("first\n"))
	if l, _, err := statedir.OpenInputLog(mem); err != nil || l.InFlight() != 0 {
		t.Fatalf("between writes: in flight %d, err %v; want 0", l.InFlight(), err)
	}
	if _, err := q.write(6, []byte("second\n")); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { recover() }()
		q.writeOut(&killedWriter{}, []byte("second\n"))
	}()
	l, pending, err := statedir.OpenInputLog(mem)
	if err != nil || l.InFlight() != 7 || string(pending) != "second\n" {
		t.Fatalf("killed in a write: in flight %d, pending %q, err %v; want 7 and the piece", l.InFlight(), pending, err)
	}
}

// fileBlocks is the 512-byte blocks a file holds.
func fileBlocks(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks
}
