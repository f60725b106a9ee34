package wire

import (
	"bytes"
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

// MaxTokenBytes is the longest token a reauth may carry, and the longest
// the server parses anywhere; longer ones are refused before parsing.
const MaxTokenBytes = 8 << 10

// Bounds of the request fields an answer may repeat (DecodeRequest).
const (
	MaxReqBytes     = 64   // req, the correlation id
	MaxIDBytes      = 128  // id, an execution ID
	MaxSignalBytes  = 16   // signal, a name such as TERM
	MaxCommandBytes = 4096 // command
	MaxCwdBytes     = 4096 // cwd
)

// ErrProtocol is wrapped by every decoding error.
var ErrProtocol = errors.New("wire: protocol error")

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
	// exactly this many input bytes (CodeInputOffset otherwise).
	InputOffset *uint64 `json:"input_offset,omitempty"`

	// start: the output flow (FlowHold, the default, or FlowLive) and how
	// long held output waits for a writer to come back.
	Flow   string `json:"flow,omitempty"`
	HoldMS int64  `json:"hold_ms,omitempty"`

	// attach
	After    uint64 `json:"after,omitempty"`
	ReadOnly bool   `json:"read_only,omitempty"`
	// Ack: this client acknowledges output (the ack request) and wants
	// input-ack messages. Seen is the output bytes up to and including
	// After as the client counted them (events' data plus gaps' bytes), so
	// that a gap's bytes are exact. Incarnation is the one the client's
	// After belongs to (from attached).
	Ack         bool   `json:"ack,omitempty"`
	Seen        uint64 `json:"seen,omitempty"`
	Incarnation string `json:"incarnation,omitempty"`

	// ack: the last sequence the client processed on Channel.
	Seq uint64 `json:"seq,omitempty"`

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
	TypeAck        = "ack"
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
	}{{"req", r.Req, MaxReqBytes}, {"id", r.ID, MaxIDBytes}, {"signal", r.Signal, MaxSignalBytes},
		{"command", r.Command, MaxCommandBytes}, {"cwd", r.Cwd, MaxCwdBytes}, {"token", r.Token, MaxTokenBytes}} {
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
	case TypeDetach, TypeCloseStdin, TypeSignal, TypeAck:
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
