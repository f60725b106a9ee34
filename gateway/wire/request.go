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

// Bounds of the request fields an answer may repeat or the server keeps
// (DecodeRequest answers a longer one with the code in parentheses).
const (
	MaxReqBytes         = 64        // req, the correlation id (invalid_request, not echoed)
	MaxIDBytes          = 200       // id, an execution ID (invalid_id); canonical IDs reach 199
	MaxSignalBytes      = 16        // signal, a name such as TERM (signal_not_allowed)
	MaxCommandBytes     = 4096      // command (invalid_spec)
	MaxCwdBytes         = 4096      // cwd (invalid_spec)
	MaxArgs             = 4096      // args, counted with the command (invalid_spec)
	MaxArgsBytes        = 256 << 10 // args and command together (invalid_spec)
	MaxIncarnationBytes = 64        // incarnation (invalid_request)
	MaxNetworkBytes     = 63        // network, a policy's name (bad_request)
)

// ErrProtocol is wrapped by every error of framing the server cannot
// parse: a control message that is not one JSON object, or a malformed
// binary frame. The server closes the connection with CloseProtocolError.
var ErrProtocol = errors.New("wire: protocol error")

// RequestError is a control message the server parsed but refuses: a
// missing or invalid field, an over-long value, an unknown type. It
// carries the stable code the server answers with in an error message;
// the connection stays open.
type RequestError struct {
	Code string // one of the Code constants
	Msg  string // safe to show
}

func (e *RequestError) Error() string { return "wire: " + e.Msg }

// refuse returns a RequestError with code and a formatted message.
func refuse(code, format string, args ...any) *RequestError {
	return &RequestError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Request is a client's control message (a JSON text frame). Type selects
// which fields matter; unknown fields are ignored, so a newer client's
// optional fields reach an older server harmlessly.
type Request struct {
	Type string `json:"type"`
	// Req is the client's correlation id, echoed in the answer.
	Req string `json:"req,omitempty"`

	ID      string `json:"id,omitempty"`      // start, attach, cancel
	Channel uint32 `json:"channel,omitempty"` // detach, close-stdin, resize, signal, cancel

	// start
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	PTY     *Size             `json:"pty,omitempty"` // nil: pipes
	// TimeoutMS is the absolute timeout; IdleTimeoutMS the idle timeout
	// of an interactive execution (a PTY, or Interactive pipes): it stops
	// once no writer has been attached and no input has arrived for so
	// long. Zero takes the server's default for the kind of execution.
	TimeoutMS     int64   `json:"timeout_ms,omitempty"`
	IdleTimeoutMS int64   `json:"idle_timeout_ms,omitempty"`
	Interactive   bool    `json:"interactive,omitempty"`
	Limits        *Limits `json:"limits,omitempty"`
	Attach        bool    `json:"attach,omitempty"` // also attach a channel to the new execution

	// close-stdin: when set, close only once the execution has received
	// exactly this many input bytes (CodeInputOffset otherwise).
	InputOffset *uint64 `json:"input_offset,omitempty"`

	// start: the output flow (FlowHold, the default, or FlowLive) and how
	// long held output waits for a writer to come back.
	Flow   string `json:"flow,omitempty"`
	HoldMS int64  `json:"hold_ms,omitempty"`
	// start: record the execution (output and resizes), and its input
	// too with RecordInput (which implies Record); either needs the
	// exec:record scope and a server with recordings on.
	Record      bool `json:"record,omitempty"`
	RecordInput bool `json:"record_input,omitempty"`
	// start: the network, "none", "host" or a network policy's name
	// (empty: the server's default); network: the policy, or "none", a
	// channel's execution follows from now on. See PROTOCOL.md, Network.
	Network string `json:"network,omitempty"`

	// start: options within the server's bounds (PROTOCOL.md, "Start
	// options"): a read-only workspace; mounts the operator declared, by
	// name; what the sandbox sees at /proc (none, private or self-exe);
	// the final result's output budget per stream, in bytes; how long the
	// result is kept after the end, in milliseconds.
	WorkspaceReadOnly bool     `json:"workspace_read_only,omitempty"`
	Mounts            []string `json:"mounts,omitempty"`
	Proc              string   `json:"proc,omitempty"`
	MaxOutputBytes    int      `json:"max_output_bytes,omitempty"`
	RetentionMS       int64    `json:"retention_ms,omitempty"`

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
	// Snapshot: for a terminal whose history after After was evicted, send
	// a screen snapshot in its place (MsgSnapshot), then the retained
	// events after it.
	Snapshot bool `json:"snapshot,omitempty"`
	// Ports: send the channel a ports message with the TCP ports the
	// execution's programs listen on, now and whenever they change.
	Ports bool `json:"ports,omitempty"`

	// ack: the last sequence the client processed on Channel.
	Seq uint64 `json:"seq,omitempty"`

	// resize
	Rows int `json:"rows,omitempty"`
	Cols int `json:"cols,omitempty"`

	// signal
	Signal string `json:"signal,omitempty"`

	// reauth
	Token string `json:"token,omitempty"`

	// exec and write: the agent exec's bodies.
	Exec  *ExecRequest  `json:"exec,omitempty"`
	Write *WriteRequest `json:"write,omitempty"`

	// forward: Port on the loopback of execution ID. forward-ack and
	// forward-close: Stream; forward-ack's Bytes are the stream's bytes
	// the client delivered since its last forward-ack (credit for the
	// server); forward-close's Reset aborts both ways, else it ends only
	// what the client sends.
	Port   int    `json:"port,omitempty"`
	Stream uint32 `json:"stream,omitempty"`
	Bytes  uint64 `json:"bytes,omitempty"`
	Reset  bool   `json:"reset,omitempty"`
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
	TypeNetwork    = "network" // change the network policy of a channel's execution
	// TypeForward opens a stream to a TCP port on an execution's loopback
	// (see PROTOCOL.md, Ports); TypeForwardAck gives the server credit
	// on a stream; TypeForwardClose ends what the client sends on it, or
	// resets it.
	TypeForward      = "forward"
	TypeForwardAck   = "forward-ack"
	TypeForwardClose = "forward-close"
	// TypeExec and TypeWrite are the agent exec's calls (exec.go): Exec
	// or Write holds the body, ID names write's execution; the answer is
	// MsgExecResult once the wait ends.
	TypeExec  = "exec"
	TypeWrite = "write"
)

// DecodeRequest parses and checks one control message. A message that is
// not one JSON object (trailing data included) is an error wrapping
// ErrProtocol. A parsed message the server refuses is a *RequestError with
// the code to answer; the returned Request then holds what could be read,
// with Req cleared when it is too long to echo. Unknown fields are
// ignored.
func DecodeRequest(b []byte) (Request, error) {
	var r Request
	if !isObject(b) {
		return r, fmt.Errorf("%w: a control message must be one JSON object", ErrProtocol)
	}
	err := json.Unmarshal(b, &r)
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typeErr):
		// A field of the wrong type: the rest was read, so the answer can
		// echo req and channel.
	case err != nil:
		return Request{}, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	if len(r.Req) > MaxReqBytes {
		r.Req = ""
		return r, refuse(CodeInvalidRequest, "req is longer than %d bytes", MaxReqBytes)
	}
	if err := r.checkType(); err != nil {
		return r, err
	}
	if typeErr != nil {
		return r, refuse(CodeInvalidRequest, "field %s must be of type %s", typeErr.Field, typeErr.Type)
	}
	if err := r.checkLengths(); err != nil {
		return r, err
	}
	return r, r.check()
}

// isObject reports whether b, past JSON whitespace, starts an object; the
// parser checks the rest (json.Unmarshal also refuses trailing data).
func isObject(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '{'
}

// checkType answers a message without a type, or of a type this server
// does not know.
func (r Request) checkType() error {
	switch r.Type {
	case TypeStart, TypeAttach, TypeDetach, TypeCloseStdin, TypeResize, TypeSignal, TypeCancel,
		TypeReauth, TypePing, TypeAck, TypeNetwork, TypeForward, TypeForwardAck, TypeForwardClose,
		TypeExec, TypeWrite:
		return nil
	case "":
		return refuse(CodeInvalidRequest, "message has no type")
	}
	return refuse(CodeUnsupported, "unknown message type %q", truncate(r.Type, 32))
}

// truncate cuts s to at most n bytes for a message that repeats it.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// checkLengths bounds the fields an answer may repeat or the server
// keeps, so that a message cannot make the server buffer or store large
// values; each is answered with the code the field's own check would give.
func (r Request) checkLengths() error {
	for _, f := range []struct {
		name  string
		value string
		max   int
		code  string
	}{
		{"id", r.ID, MaxIDBytes, CodeInvalidID}, {"signal", r.Signal, MaxSignalBytes, CodeSignalNotAllowed},
		{"command", r.Command, MaxCommandBytes, CodeInvalidSpec}, {"cwd", r.Cwd, MaxCwdBytes, CodeInvalidSpec},
		{"token", r.Token, MaxTokenBytes, CodeUnauthorized}, {"incarnation", r.Incarnation, MaxIncarnationBytes, CodeInvalidRequest},
		{"network", r.Network, MaxNetworkBytes, CodeBadRequest},
	} {
		if len(f.value) > f.max {
			return refuse(f.code, "%s is longer than %d bytes", f.name, f.max)
		}
	}
	if len(r.Args)+1 > MaxArgs {
		return refuse(CodeInvalidSpec, "at most %d arguments", MaxArgs-1)
	}
	total := len(r.Command)
	for _, a := range r.Args {
		total += len(a)
	}
	if total > MaxArgsBytes {
		return refuse(CodeInvalidSpec, "command and arguments take more than %d bytes", MaxArgsBytes)
	}
	return nil
}

// check answers a message that lacks a field its type needs, or whose
// flow is unknown. Resize takes any rows and cols: the server clamps them.
func (r Request) check() error {
	need := func(ok bool, what string) error {
		if !ok {
			return refuse(CodeInvalidRequest, "%s needs %s", r.Type, what)
		}
		return nil
	}
	switch r.Type {
	case TypeStart:
		if r.Flow != "" && r.Flow != FlowHold && r.Flow != FlowLive {
			return refuse(CodeInvalidSpec, "flow must be %q or %q", FlowHold, FlowLive)
		}
		if r.HoldMS < 0 {
			return refuse(CodeInvalidSpec, "hold_ms must not be negative")
		}
	case TypeAttach:
		return need(r.ID != "", "id")
	case TypeDetach, TypeCloseStdin, TypeSignal, TypeAck, TypeResize:
		return need(r.Channel != 0, "channel")
	case TypeCancel:
		return need(r.Channel != 0 || r.ID != "", "channel or id")
	case TypeReauth:
		return need(r.Token != "", "token")
	case TypeExec:
		return need(r.Exec != nil, "exec")
	case TypeWrite:
		if err := need(r.ID != "", "id"); err != nil {
			return err
		}
		return need(r.Write != nil, "write")
	case TypeNetwork:
		if err := need(r.Channel != 0, "channel"); err != nil {
			return err
		}
		return need(r.Network != "", "network")
	case TypeForward:
		if err := need(r.ID != "", "id"); err != nil {
			return err
		}
		if r.Port < 1 || r.Port > 65535 {
			return refuse(CodeInvalidRequest, "forward needs a port from 1 to 65535")
		}
	case TypeForwardAck:
		if err := need(r.Stream != 0, "stream"); err != nil {
			return err
		}
		return need(r.Bytes != 0, "bytes")
	case TypeForwardClose:
		return need(r.Stream != 0, "stream")
	}
	return nil
}
