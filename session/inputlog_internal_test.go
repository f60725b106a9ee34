package session

import (
	"bytes"
	"sync/atomic"
	"testing"
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
	mem := make([]byte, inputLogSize(4096))
	q := newInputQueue(4096, new(atomic.Uint64))
	q.log = newInputLog(mem)
	if _, err := q.write(0, []byte("first\n")); err != nil {
		t.Fatal(err)
	}
	q.writeOut(&bytes.Buffer{}, []byte("first\n"))
	if l, _, err := openInputLog(mem); err != nil || l.inFlight() != 0 {
		t.Fatalf("between writes: in flight %d, err %v; want 0", l.inFlight(), err)
	}
	if _, err := q.write(6, []byte("second\n")); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { recover() }()
		q.writeOut(&killedWriter{}, []byte("second\n"))
	}()
	l, pending, err := openInputLog(mem)
	if err != nil || l.inFlight() != 7 || string(pending) != "second\n" {
		t.Fatalf("killed in a write: in flight %d, pending %q, err %v; want 7 and the piece", l.inFlight(), pending, err)
	}
}
