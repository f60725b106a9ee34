package session

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termgate/termgate/session/internal/statedir"
	"golang.org/x/sys/unix"
)

// inputPipe returns a pipe of one page whose writing end the queue takes,
// as a process's stdin, and the reading end, which the test reads.
func inputPipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	raw, err := w.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	raw.Control(func(fd uintptr) { _, serr = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 4096) }) // not Fd(), which blocks
	if serr != nil {
		t.Fatal(serr)
	}
	return r, w
}

// readN reads n bytes from r, within a bounded time.
func readN(t *testing.T, r *os.File, n int) []byte {
	t.Helper()
	r.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, n)
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatalf("read %d bytes of input: %v", n, err)
	}
	return got
}

// waitWriter waits, a bounded time, for the queue's writer to return.
func waitWriter(t *testing.T, q *inputQueue) {
	t.Helper()
	done := make(chan struct{})
	go func() { q.wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer goroutine still runs with nothing left to write")
	}
}

// TestInputWrittenByTheCaller: a keystroke to a program that takes it is
// written on the caller's goroutine, before write returns, and starts no
// writer goroutine.
func TestInputWrittenByTheCaller(t *testing.T) {
	t.Parallel()
	r, w := inputPipe(t)
	q := newInputQueue(1<<16, new(atomic.Uint64))
	q.attach(w)
	for i, key := range []string{"a", "b", "c"} {
		if off, err := q.write(uint64(i), []byte(key)); err != nil || off != uint64(i+1) {
			t.Fatalf("write %q: offset %d, %v", key, off, err)
		}
		q.mu.Lock()
		running := q.running
		q.mu.Unlock()
		if running {
			t.Fatalf("write %q started the writer goroutine", key)
		}
		if got := readN(t, r, 1); string(got) != key {
			t.Fatalf("read %q, want %q", got, key)
		}
	}
}

// TestInputWriterEndsOnceDrained: input the program cannot take at once
// waits for the writer goroutine, in order after what was written
// directly, and the writer ends once it wrote everything, so an idle
// execution holds none.
func TestInputWriterEndsOnceDrained(t *testing.T) {
	t.Parallel()
	r, w := inputPipe(t)
	q := newInputQueue(1<<16, new(atomic.Uint64))
	q.attach(w)
	var want []byte
	for i := range 6 {
		chunk := bytes.Repeat([]byte{byte('a' + i)}, 3000)
		if _, err := q.write(uint64(len(want)), chunk); err != nil {
			t.Fatal(err)
		}
		want = append(want, chunk...)
	}
	if got := readN(t, r, len(want)); !bytes.Equal(got, want) {
		t.Fatal("input came out of order")
	}
	waitWriter(t, q)
	if _, err := q.write(uint64(len(want)), []byte("z")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, r, 1); string(got) != "z" {
		t.Fatalf("read %q after the writer ended, want z", got)
	}
	q.shutdown()
	waitWriter(t, q)
}

// TestInputCloseAfterPending: end of file reaches the program after the
// input queued before it, and the writer then ends.
func TestInputCloseAfterPending(t *testing.T) {
	t.Parallel()
	r, w := inputPipe(t)
	q := newInputQueue(1<<16, new(atomic.Uint64))
	q.attach(w)
	in := bytes.Repeat([]byte("x"), 10000)
	if _, err := q.write(0, in); err != nil {
		t.Fatal(err)
	}
	if _, first, err := q.closeStdin(nil); err != nil || !first {
		t.Fatalf("close stdin: first %v, %v", first, err)
	}
	r.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, in) {
		t.Fatalf("read %d bytes before end of file, err %v; want %d", len(got), err, len(in))
	}
	waitWriter(t, q)
}

// TestInputDirectWriteRecorded: a durable execution's input written by
// the caller is recorded as written, piece by piece, and a piece the
// program took in part leaves nothing in flight.
func TestInputDirectWriteRecorded(t *testing.T) {
	t.Parallel()
	r, w := inputPipe(t)
	mem := make([]byte, statedir.InputLogSize(1<<16))
	q := newInputQueue(1<<16, new(atomic.Uint64))
	q.log = statedir.NewInputLog(mem)
	q.attach(w)
	if _, err := q.write(0, []byte("ls\n")); err != nil {
		t.Fatal(err)
	}
	if l, pending, err := statedir.OpenInputLog(mem); err != nil || l.Written() != 3 || l.InFlight() != 0 || len(pending) != 0 {
		t.Fatalf("after a direct write: written %d, in flight %d, pending %q, err %v; want 3, 0, none",
			l.Written(), l.InFlight(), pending, err)
	}
	q.mu.Lock() // hold the writer off: what follows is the direct write's alone
	big := bytes.Repeat([]byte("y"), 4096+100)
	rest := q.writeDirectLocked(big)
	q.mu.Unlock()
	// Read as the log's header: the bytes the direct write left were never
	// accepted, which OpenInputLog would refuse.
	written, writing := binary.LittleEndian.Uint64(mem[16:]), binary.LittleEndian.Uint64(mem[32:])
	if written != 3+uint64(len(big)-len(rest)) || writing > written || len(rest) == 0 {
		t.Fatalf("a full pipe: written %d, writing %d, %d bytes left; want %d, none in flight, some",
			written, writing, len(rest), 3+len(big)-len(rest))
	}
	readN(t, r, 3+len(big)-len(rest))
}
