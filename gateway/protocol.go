package gateway

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// Subprotocol is the WebSocket subprotocol of wire protocol v1. A client
// must offer it; the server never echoes anything else.
const Subprotocol = "termgate.v1"

// BearerPrefix marks a subprotocol entry that carries the token, for
// browsers, which cannot set an Authorization header.
const BearerPrefix = "termgate.bearer."

// Binary frame kinds: the first byte of every binary message.
const (
	FrameOutput byte = 0x01 // server to client: output of an attached channel
	FrameInput  byte = 0x02 // client to server: input for an attached channel
)

// Header sizes of the binary frames.
const (
	outputHeaderLen = 1 + 4 + 8 + 1 + 8 + 4 // kind, channel, seq, stream, offset, length
	inputHeaderLen  = 1 + 4 + 8             // kind, channel, offset
)

// ErrProtocol is wrapped by every decoding error.
var ErrProtocol = errors.New("gateway: protocol error")

// Request is a client's control message (a JSON text frame). Type selects
// which fields matter; unknown fields are an error, so typos do not pass
// silently.
type Request struct {
	Type string `json:"type"`
	// Req is the client's correlation id, echoed in the answer.
	Req string `json:"req,omitempty"`

	ID      string `json:"id,omitempty"`      // start, attach, cancel
	Channel uint32 `json:"channel,omitempty"` // detach, close-stdin, resize, signal, cancel

	// start
	Command   string            `json:"command,omitempty"`
	Args      []string          `json:"args,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	PTY       *Size             `json:"pty,omitempty"` // nil: pipes
	TimeoutMS int64             `json:"timeout_ms,omitempty"`
	Limits    *Limits           `json:"limits,omitempty"`
	Attach    bool              `json:"attach,omitempty"` // also attach a channel to the new execution

	// close-stdin: when set, close only once the execution has received
	// exactly this many input bytes (ErrInputOffset otherwise).
	InputOffset *uint64 `json:"input_offset,omitempty"`

	// attach
	After    uint64 `json:"after,omitempty"`
	ReadOnly bool   `json:"read_only,omitempty"`

	// resize
	Rows int `json:"rows,omitempty"`
	Cols int `json:"cols,omitempty"`

	// signal
	Signal string `json:"signal,omitempty"`

	// reauth
	Token string `json:"token,omitempty"`
}

// Size is a terminal size.
type Size struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}

// Limits are the ceilings a client may ask for, each at most what the
// server allows.
type Limits struct {
	CPUSeconds   uint64 `json:"cpu_seconds,omitempty"`
	Memory       int64  `json:"memory,omitempty"`
	Pids         int64  `json:"pids,omitempty"`
	OpenFiles    uint64 `json:"open_files,omitempty"`
	FileSize     uint64 `json:"file_size,omitempty"`
	AddressSpace uint64 `json:"address_space,omitempty"`
}

// Request types.
const (
	TypeStart      = "start"
	TypeAttach     = "attach"
	TypeDetach     = "detach"
	TypeCloseStdin = "close-stdin"
	TypeResize     = "resize"
	TypeSignal     = "signal"
	TypeCancel     = "cancel"
	TypeReauth     = "reauth"
	TypePing       = "ping"
)

// DecodeRequest parses and checks one control message.
func DecodeRequest(b []byte) (Request, error) {
	var r Request
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	if dec.More() {
		return r, fmt.Errorf("%w: trailing data after the message", ErrProtocol)
	}
	if err := r.checkLengths(); err != nil {
		return r, err
	}
	return r, r.check()
}

// checkLengths bounds the fields an answer may repeat, so that errors
// echoing them cannot make the server buffer large messages.
func (r Request) checkLengths() error {
	for _, f := range []struct {
		name  string
		value string
		max   int
	}{{"req", r.Req, 64}, {"id", r.ID, 128}, {"signal", r.Signal, 16}, {"command", r.Command, 4096},
		{"cwd", r.Cwd, 4096}, {"token", r.Token, MaxTokenBytes}} {
		if len(f.value) > f.max {
			return fmt.Errorf("%w: %s is longer than %d bytes", ErrProtocol, f.name, f.max)
		}
	}
	return nil
}

func (r Request) check() error {
	need := func(ok bool, what string) error {
		if !ok {
			return fmt.Errorf("%w: %s needs %s", ErrProtocol, r.Type, what)
		}
		return nil
	}
	switch r.Type {
	case TypeStart, TypePing:
		return nil
	case TypeAttach:
		return need(r.ID != "", "id")
	case TypeDetach, TypeCloseStdin, TypeSignal:
		return need(r.Channel != 0, "channel")
	case TypeResize:
		return need(r.Channel != 0 && r.Rows > 0 && r.Cols > 0, "channel, rows and cols")
	case TypeCancel:
		return need(r.Channel != 0 || r.ID != "", "channel or id")
	case TypeReauth:
		return need(r.Token != "", "token")
	case "":
		return fmt.Errorf("%w: message has no type", ErrProtocol)
	}
	return fmt.Errorf("%w: unknown message type %q", ErrProtocol, r.Type)
}

// Input is a decoded input frame.
type Input struct {
	Channel uint32
	Offset  uint64
	Data    []byte // aliases the frame
}

// DecodeInput parses a binary frame from a client.
func DecodeInput(b []byte) (Input, error) {
	if len(b) < inputHeaderLen {
		return Input{}, fmt.Errorf("%w: binary frame of %d bytes is shorter than the %d-byte input header", ErrProtocol, len(b), inputHeaderLen)
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

// AppendInput encodes an input frame (for clients and tests).
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

// appendOutputHeader encodes the header of an output frame carrying n
// bytes. The length lets a client tell a message cut short by a dying
// connection, which some WebSocket libraries hand over as if complete,
// from a whole one: it must resume rather than keep a truncated event.
func appendOutputHeader(dst []byte, channel uint32, seq uint64, stream uint8, offset uint64, n int) []byte {
	dst = append(dst, FrameOutput)
	dst = binary.BigEndian.AppendUint32(dst, channel)
	dst = binary.BigEndian.AppendUint64(dst, seq)
	dst = append(dst, stream)
	dst = binary.BigEndian.AppendUint64(dst, offset)
	return binary.BigEndian.AppendUint32(dst, uint32(n))
}

// DecodeOutput parses a binary frame from the server (for clients and
// tests). A frame shorter than its length field is an error.
func DecodeOutput(b []byte) (Output, error) {
	if len(b) < outputHeaderLen || b[0] != FrameOutput {
		return Output{}, fmt.Errorf("%w: not an output frame", ErrProtocol)
	}
	if n := binary.BigEndian.Uint32(b[22:26]); int64(n) != int64(len(b)-outputHeaderLen) {
		return Output{}, fmt.Errorf("%w: output frame holds %d bytes, its header says %d", ErrProtocol, len(b)-outputHeaderLen, n)
	}
	return Output{
		Channel: binary.BigEndian.Uint32(b[1:5]), Seq: binary.BigEndian.Uint64(b[5:13]),
		Stream: b[13], Offset: binary.BigEndian.Uint64(b[14:22]), Data: b[outputHeaderLen:],
	}, nil
}

// Message is a server control message (a JSON text frame). Type selects
// which fields are set.
type Message struct {
	Type string `json:"type"`
	Req  string `json:"req,omitempty"`

	ID      string `json:"id,omitempty"`
	Channel uint32 `json:"channel,omitempty"`

	// started, attached
	Status      string `json:"status,omitempty"`
	PTY         bool   `json:"pty,omitempty"`
	FirstSeq    uint64 `json:"first_seq,omitempty"`
	LastSeq     uint64 `json:"last_seq,omitempty"`
	InputOffset uint64 `json:"input_offset,omitempty"`
	ReadOnly    bool   `json:"read_only,omitempty"`

	// event, exit
	Seq    uint64 `json:"seq,omitempty"`
	Event  string `json:"event,omitempty"` // started, resize, stdin-closed, signal
	Rows   int    `json:"rows,omitempty"`
	Cols   int    `json:"cols,omitempty"`
	Signal string `json:"signal,omitempty"`
	Code   *int   `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`

	// gap
	From  uint64 `json:"from,omitempty"`
	To    uint64 `json:"to,omitempty"`
	Bytes uint64 `json:"bytes,omitempty"`

	// error
	Error   string `json:"error,omitempty"` // a stable code
	Message string `json:"message,omitempty"`

	// auth-expiring, reauthed
	ExpiresAt string `json:"expires_at,omitempty"`
}

// Message types.
const (
	MsgStarted      = "started"
	MsgAttached     = "attached"
	MsgDetached     = "detached"
	MsgEvent        = "event"
	MsgGap          = "gap"
	MsgExit         = "exit"
	MsgError        = "error"
	MsgPong         = "pong"
	MsgOK           = "ok"
	MsgAuthExpiring = "auth-expiring"
)
