package wire

import (
	"encoding/binary"
	"fmt"
)

// Binary frame kinds: the first byte of every binary message.
const (
	FrameOutput byte = 0x01 // server to client: output of an attached channel
	FrameInput  byte = 0x02 // client to server: input for an attached channel
	// FrameForward carries a forward stream's bytes, either way: the
	// kind, the stream (4 bytes), the bytes.
	FrameForward byte = 0x03
)

// ForwardHeaderLen is the header of a forward frame.
const ForwardHeaderLen = 1 + 4

// AppendForward appends a forward frame to dst.
func AppendForward(dst []byte, stream uint32, data []byte) []byte {
	dst = append(dst, FrameForward)
	dst = binary.BigEndian.AppendUint32(dst, stream)
	return append(dst, data...)
}

// DecodeForward parses a forward frame: its stream and its bytes, which
// alias b.
func DecodeForward(b []byte) (uint32, []byte, error) {
	if len(b) < ForwardHeaderLen || b[0] != FrameForward {
		return 0, nil, fmt.Errorf("%w: not a forward frame", ErrProtocol)
	}
	stream := binary.BigEndian.Uint32(b[1:5])
	if stream == 0 {
		return 0, nil, fmt.Errorf("%w: forward frame for stream 0", ErrProtocol)
	}
	return stream, b[ForwardHeaderLen:], nil
}

// Header sizes of the binary frames: an input frame is its header and
// the data; an output frame is its header and exactly the length it states.
const (
	OutputHeaderLen = 1 + 4 + 8 + 1 + 8 + 4 // kind, channel, seq, stream, offset, length
	InputHeaderLen  = 1 + 4 + 8             // kind, channel, offset
	// MaxInputFrameBytes is the most input data a client sends in one
	// frame (a hello states it). The server takes larger frames whose
	// new bytes fit the execution's input buffer, for older clients.
	MaxInputFrameBytes = 16 << 10
)

// Input is a decoded input frame.
type Input struct {
	Channel uint32
	Offset  uint64
	Data    []byte // aliases the frame
}

// DecodeInput parses a binary frame from a client.
func DecodeInput(b []byte) (Input, error) {
	if len(b) < InputHeaderLen {
		return Input{}, fmt.Errorf("%w: binary frame of %d bytes is shorter than the %d-byte input header", ErrProtocol, len(b), InputHeaderLen)
	}
	if b[0] != FrameInput {
		return Input{}, fmt.Errorf("%w: binary frame kind %#x, want input (%#x)", ErrProtocol, b[0], FrameInput)
	}
	in := Input{Channel: binary.BigEndian.Uint32(b[1:5]), Offset: binary.BigEndian.Uint64(b[5:13]), Data: b[13:]}
	if in.Channel == 0 {
		return Input{}, fmt.Errorf("%w: input for channel 0", ErrProtocol)
	}
	return in, nil
}

// AppendInput appends an input frame to dst (clients send these).
func AppendInput(dst []byte, channel uint32, offset uint64, data []byte) []byte {
	dst = append(dst, FrameInput)
	dst = binary.BigEndian.AppendUint32(dst, channel)
	dst = binary.BigEndian.AppendUint64(dst, offset)
	return append(dst, data...)
}

// Output is a decoded output frame.
type Output struct {
	Channel uint32
	Seq     uint64
	Stream  uint8 // 1 pty, 2 stdout, 3 stderr
	Offset  uint64
	Data    []byte // aliases the frame
}

// AppendOutputHeader encodes the header of an output frame carrying n
// bytes. The length lets a client tell a message cut short by a dying
// connection, which some WebSocket libraries hand over as if complete,
// from a whole one: it must resume rather than keep a truncated event.
func AppendOutputHeader(dst []byte, channel uint32, seq uint64, stream uint8, offset uint64, n int) []byte {
	dst = append(dst, FrameOutput)
	dst = binary.BigEndian.AppendUint32(dst, channel)
	dst = binary.BigEndian.AppendUint64(dst, seq)
	dst = append(dst, stream)
	dst = binary.BigEndian.AppendUint64(dst, offset)
	return binary.BigEndian.AppendUint32(dst, uint32(n))
}

// DecodeOutput parses a binary frame from the server (clients read
// these). A frame shorter than its length field is an error.
func DecodeOutput(b []byte) (Output, error) {
	if len(b) < OutputHeaderLen || b[0] != FrameOutput {
		return Output{}, fmt.Errorf("%w: not an output frame", ErrProtocol)
	}
	if n := binary.BigEndian.Uint32(b[22:26]); int64(n) != int64(len(b)-OutputHeaderLen) {
		return Output{}, fmt.Errorf("%w: output frame holds %d bytes, its header says %d", ErrProtocol, len(b)-OutputHeaderLen, n)
	}
	return Output{
		Channel: binary.BigEndian.Uint32(b[1:5]), Seq: binary.BigEndian.Uint64(b[5:13]),
		Stream: b[13], Offset: binary.BigEndian.Uint64(b[14:22]), Data: b[OutputHeaderLen:],
	}, nil
}
