package park

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// clientFrame encodes a masked frame as a client sends it.
func clientFrame(fin bool, opcode byte, payload []byte) []byte {
	b0 := opcode
	if fin {
		b0 |= 0x80
	}
	out := []byte{b0}
	switch n := len(payload); {
	case n < 126:
		out = append(out, 0x80|byte(n))
	case n <= 0xffff:
		out = binary.BigEndian.AppendUint16(append(out, 0x80|126), uint16(n))
	default:
		out = binary.BigEndian.AppendUint64(append(out, 0x80|127), uint64(n))
	}
	out = append(out, 1, 2, 3, 4) // the masking key; the payload is left as it is
	return append(out, payload...)
}

// TestFrameCursorFindsWhereMessagesEnd feeds a client's stream of frames
// (short, 16-bit and 64-bit lengths, empty ones, a fragmented message
// with a ping between its frames) in every split, byte by byte and in
// random chunks: the cursor is at rest exactly at the end of a frame
// outside a fragmented message.
func TestFrameCursorFindsWhereMessagesEnd(t *testing.T) {
	t.Parallel()
	frames := []struct {
		b    []byte
		rest bool // at rest once this frame is in
	}{
		{clientFrame(true, 2, []byte("keys")), true},
		{clientFrame(true, 10, nil), true}, // a pong
		{clientFrame(true, 1, make([]byte, 200)), true},
		{clientFrame(false, 2, make([]byte, 3)), false},
		{clientFrame(true, 9, []byte("ping")), false},
		{clientFrame(false, 0, make([]byte, 70000)), false},
		{clientFrame(true, 0, nil), true},
		{clientFrame(true, 2, make([]byte, 125)), true},
		{clientFrame(true, 2, make([]byte, 126)), true},
		{clientFrame(true, 2, make([]byte, 65536)), true},
	}
	var stream []byte
	rest := map[int]bool{0: true} // offsets where the cursor is at rest
	for _, f := range frames {
		stream = append(stream, f.b...)
		if f.rest {
			rest[len(stream)] = true
		}
	}

	var f FrameCursor
	for i := range stream {
		if f.AtRest() != rest[i] {
			t.Fatalf("byte by byte: at offset %d AtRest is %v, want %v", i, f.AtRest(), rest[i])
		}
		f.Feed(stream[i : i+1])
	}
	if !f.AtRest() {
		t.Fatal("byte by byte: not at rest at the stream's end")
	}

	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var f FrameCursor
		for off := 0; off < len(stream); {
			n := min(1+rng.IntN(300), len(stream)-off)
			if round%2 == 1 {
				n = min(1+rng.IntN(70000), len(stream)-off)
			}
			f.Feed(stream[off : off+n])
			off += n
			if f.AtRest() != rest[off] {
				t.Fatalf("round %d: at offset %d AtRest is %v, want %v", round, off, f.AtRest(), rest[off])
			}
		}
	}
}
