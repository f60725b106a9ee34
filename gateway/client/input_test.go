package client

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// numbered returns n bytes whose value says their offset modulo 251.
func numbered(from, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((from + i) % 251)
	}
	return b
}

func TestInputWindowsAndRewinds(t *testing.T) {
	var in input
	in.keep(numbered(0, 100<<10))
	from, p := in.window()
	if from != 0 || !bytes.Equal(p, numbered(0, inputWindow)) {
		t.Fatalf("first window: from %d, %d bytes", from, len(p))
	}
	from, p = in.window()
	if from != inputWindow || !bytes.Equal(p, numbered(inputWindow, 100<<10-inputWindow)) || in.next != in.end {
		t.Fatalf("second window: from %d, %d bytes, next %d of %d", from, len(p), in.next, in.end)
	}
	// The server has 1,000 bytes: the rest is sent again from there.
	if lost := in.rewind(1000); lost != 0 || in.base != 1000 || in.next != 1000 {
		t.Fatalf("rewind to 1000: lost %d, base %d, next %d", lost, in.base, in.next)
	}
	if from, p = in.window(); from != 1000 || !bytes.Equal(p, numbered(1000, inputWindow)) {
		t.Fatalf("window after the rewind: from %d, %d bytes", from, len(p))
	}
	// A stale, lower report does not move back below what the server had.
	if lost := in.rewind(10); lost != 0 || in.next != 1000 {
		t.Fatalf("stale rewind: lost %d, next %d", lost, in.next)
	}
	// Another writer's bytes: the server has more than was written here.
	if lost := in.rewind(200 << 10); lost != 0 || in.base != 200<<10 || in.end != 200<<10 || len(in.buf) != 0 {
		t.Fatalf("rewind past the end: lost %d, base %d, end %d", lost, in.base, in.end)
	}
	in.keep([]byte("tail"))
	if from, p = in.window(); from != 200<<10 || string(p) != "tail" {
		t.Fatalf("after renumbering: from %d, %q", from, p)
	}
}

func TestInputBoundDropsOnlySentBytes(t *testing.T) {
	var in input
	in.keep(numbered(0, maxInputBuffer))
	in.keep(numbered(maxInputBuffer, 10))
	if in.base != 0 || len(in.buf) != maxInputBuffer+10 {
		t.Fatalf("unsent bytes were dropped: base %d, %d kept", in.base, len(in.buf))
	}
	for in.next < in.end {
		in.window()
	}
	in.keep(numbered(maxInputBuffer+10, 4))
	if in.base != 14 || len(in.buf) != maxInputBuffer {
		t.Fatalf("after sending: base %d, %d kept", in.base, len(in.buf))
	}
	// The server has nothing (the connection died): 14 bytes are lost and
	// what is kept follows what the server has.
	if lost := in.rewind(0); lost != 14 || in.base != 0 || in.end != maxInputBuffer {
		t.Fatalf("rewind to 0: lost %d, base %d, end %d", lost, in.base, in.end)
	}
	if _, p := in.window(); !bytes.Equal(p, numbered(14, inputWindow)) {
		t.Fatalf("window after the loss starts with %v", p[:4])
	}
}

// TestWriteWaitsWhileTooMuchIsUnsent: Write never drops unsent input; past
// maxInputBuffer unsent bytes it waits until a send takes some, or until
// the execution ends.
func TestWriteWaitsWhileTooMuchIsUnsent(t *testing.T) {
	e := &Execution{c: &Client{}, closed: make(chan struct{}), ready: make(chan struct{})} // never attached
	if n, err := e.Write(numbered(0, maxInputBuffer+1)); n != maxInputBuffer+1 || err != nil {
		t.Fatalf("first write: %d, %v", n, err)
	}
	returned := make(chan error, 2)
	write := func() {
		_, err := e.Write([]byte("x"))
		returned <- err
	}
	go write()
	select {
	case err := <-returned:
		t.Fatalf("a write past the bound returned (%v) with %d bytes unsent", err, maxInputBuffer+1)
	case <-time.After(200 * time.Millisecond):
	}
	e.mu.Lock()
	e.in.window() // a send takes 64 KiB
	e.mu.Unlock()
	if err := <-returned; err != nil {
		t.Fatalf("write after a send: %v", err)
	}
	// Only sent bytes were dropped to keep the bound.
	if e.in.end != maxInputBuffer+2 || e.in.base != 2 || len(e.in.buf) != maxInputBuffer {
		t.Fatalf("kept input: base %d, end %d, %d bytes", e.in.base, e.in.end, len(e.in.buf))
	}
	e.Write(make([]byte, inputWindow)) // over the bound again
	go write()                         // waits, until the execution ends
	e.finish(ErrClosed)
	if err := <-returned; err != io.ErrClosedPipe {
		t.Fatalf("write when the execution ended: %v", err)
	}
}
