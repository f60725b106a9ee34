package session

import (
	"bytes"
	"path/filepath"
	"sync/atomic"
	"testing"

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

// TestInputLogTakesNoPageUntilInput: a fresh input file stays a hole,
// no page of memory, until the first input accepted writes its header;
// a header of zeros reads as a log that had no input, and one with
// offsets but no magic as no input file.
func TestInputLogTakesNoPageUntilInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mem, err := mapFile(dir, "input", inputLogSize(4096), true)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	newInputLog(mem)
	if blocks := fileBlocks(t, filepath.Join(dir, "input")); blocks != 0 {
		t.Errorf("a fresh input file holds %d blocks", blocks)
	}
	// Read back before any input, as a restart reads it: its first accept
	// still lays the header.
	l, pending, err := openInputLog(mem)
	if err != nil || l.acceptedAt() != 0 || len(pending) != 0 {
		t.Fatalf("a log without input: accepted %v, pending %q, %v", l, pending, err)
	}
	l.accept(0, []byte("ls\n"))
	if blocks := fileBlocks(t, filepath.Join(dir, "input")); blocks == 0 {
		t.Error("the input file holds no block after input")
	}
	got, pending, err := openInputLog(mem)
	if err != nil || got.accepted.Load() != 3 || string(pending) != "ls\n" {
		t.Fatalf("after input: %v, pending %q", err, pending)
	}
	clear(mem[:8]) // the magic
	if _, _, err := openInputLog(mem); err == nil {
		t.Error("a header with offsets and no magic was read as an input file")
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
