package client

import (
	"bytes"
	"testing"
)

func TestInputWindowsAndRewinds(t *testing.T) {
	var in input
	in.keep(bytes.Repeat([]byte("a"), 100<<10))
	from, p, more := in.window()
	if from != 0 || len(p) != inputWindow || !more {
		t.Fatalf("first window: from %d, %d bytes, more %v", from, len(p), more)
	}
	from, p, more = in.window()
	if from != inputWindow || len(p) != 100<<10-inputWindow || more {
		t.Fatalf("second window: from %d, %d bytes, more %v", from, len(p), more)
	}
	// The server has 1,000 bytes: the rest is sent again, and the kept
	// input starts there.
	if lost := in.rewind(1000); lost != 0 || in.base != 1000 || in.next != 1000 || len(in.buf) != 100<<10-1000 {
		t.Fatalf("rewind to 1000: lost %d, %+v", lost, in)
	}
	// Another writer's bytes: the server has more than was written here.
	if lost := in.rewind(200 << 10); lost != 0 || in.base != 200<<10 || in.end != 200<<10 || len(in.buf) != 0 {
		t.Fatalf("rewind past the end: lost %d, base %d end %d", lost, in.base, in.end)
	}
}

func TestInputBoundLosesOldestAndRenumbers(t *testing.T) {
	var in input
	in.keep(bytes.Repeat([]byte("a"), maxInputBuffer))
	in.keep([]byte("tail"))
	if in.base != 4 || in.end != maxInputBuffer+4 {
		t.Fatalf("after the bound: base %d, end %d", in.base, in.end)
	}
	// The server has nothing: 4 bytes are lost, what is kept follows.
	if lost := in.rewind(0); lost != 4 || in.base != 0 || in.end != maxInputBuffer {
		t.Fatalf("rewind to 0: lost %d, base %d, end %d", lost, in.base, in.end)
	}
	if _, p, _ := in.window(); len(p) != inputWindow || p[0] != 'a' {
		t.Fatalf("window after the loss: %d bytes", len(p))
	}
}
