package wire

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
	// Incarnation tells apart the executions one ID named over time (an
	// ID is reused after retention): a client that kept an after for
	// another incarnation starts over from 0.
	Incarnation string `json:"incarnation,omitempty"`
	// Ack is set in attached when the channel is served with acknowledged
	// delivery: the server holds output until the client acks it.
	Ack bool `json:"ack,omitempty"`
	// Flow is the execution's output flow: FlowHold or FlowLive.
	Flow string `json:"flow,omitempty"`

	// event, exit; a notice event also has Reason, Message and At.
	Seq    uint64 `json:"seq,omitempty"`
	Event  string `json:"event,omitempty"` // started, resize, stdin-closed, signal, notice
	Rows   int    `json:"rows,omitempty"`
	Cols   int    `json:"cols,omitempty"`
	Signal string `json:"signal,omitempty"`
	Code   *int   `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`

	// gap
	From  uint64 `json:"from,omitempty"`
	To    uint64 `json:"to,omitempty"`
	Bytes uint64 `json:"bytes,omitempty"`
	// snapshot: Data is the escape sequences that reproduce the terminal
	// as it was after event Seq, for a fresh terminal of Rows x Cols; Seen
	// is the output bytes up to and including Seq. From, To, Bytes,
	// Inexact and Cause describe the history it stands in for.
	Data string `json:"data,omitempty"`
	Seen uint64 `json:"seen,omitempty"`

	// Inexact is set on a gap whose Bytes is an upper bound: the attach
	// gave an evicted after without seen.
	Inexact bool `json:"inexact,omitempty"`
	// Cause says why output was lost (gap): one of the Loss constants.
	Cause string `json:"cause,omitempty"`

	// input-ack: InputOffset is the input the execution accepted;
	// InputEnd is the end offset of the newest input frame processed, so
	// InputEnd > InputOffset means frames were refused (Error says why)
	// and the client resends from InputOffset after a pause.
	InputEnd uint64 `json:"input_end,omitempty"`

	// error
	Error   string `json:"error,omitempty"` // a stable code
	Message string `json:"message,omitempty"`
	// RetryMS, on an error or a server-sent detached whose Error is
	// CodeUnavailable, is how long to wait before trying again: the node
	// that owns the execution is not answering.
	RetryMS int64 `json:"retry_ms,omitempty"`

	// Node, on hello, started and attached, names the node that serves the
	// connection (hello) or owns the execution (started, attached): a
	// routing hint (?node= on /v1/connect), never part of an ID to parse.
	Node string `json:"node,omitempty"`

	// auth-expiring, reauthed
	ExpiresAt string `json:"expires_at,omitempty"`

	// forwarded, forward-ack, forward-eof, forward-end: the stream; its
	// Port, and Window, the bytes either side may send ahead of credit.
	// forward-ack's Bytes are credit for the client; forward-end's Up
	// and Down the bytes to and from the port, and Reason how it ended
	// (a ForwardEnd constant).
	Stream uint32 `json:"stream,omitempty"`
	Port   int    `json:"port,omitempty"`
	Window int    `json:"window,omitempty"`
	Up     uint64 `json:"up,omitempty"`
	Down   uint64 `json:"down,omitempty"`

	// ports: the TCP ports the channel's execution listens on, all of
	// them (a message replaces the last).
	Ports []Port `json:"ports,omitempty"`

	// At is when what a notice event announces happens (RFC 3339, UTC);
	// absent when nothing is due.
	At string `json:"at,omitempty"`

	// exec-result: the answer of an exec or write request.
	Result *ExecResult `json:"result,omitempty"`

	// hello: what the server is and supports.
	Server   string   `json:"server,omitempty"`   // "termgate" and its version
	Protocol int      `json:"protocol,omitempty"` // 1
	Features []string `json:"features,omitempty"` // the Feature constants it supports
	Limits   *Bounds  `json:"limits,omitempty"`
}

// Bounds are the server's limits as a hello states them. Durations are
// in milliseconds, sizes in bytes; zero means none or not stated.
type Bounds struct {
	MaxMessageBytes  int   `json:"max_message_bytes,omitempty"`
	MaxChannels      int   `json:"max_channels,omitempty"`
	RingBytes        int   `json:"ring_bytes,omitempty"`
	RingEvents       int   `json:"ring_events,omitempty"`
	HoldMS           int64 `json:"hold_ms,omitempty"`
	InputBufferBytes int   `json:"input_buffer_bytes,omitempty"`
	InputFrameBytes  int   `json:"input_frame_bytes,omitempty"`
	InputPerSecond   int   `json:"input_per_second,omitempty"`
	// ResizesPerSecond is the sustained rate of resize and signal
	// requests per subject.
	ResizesPerSecond int   `json:"resizes_per_second,omitempty"`
	PingIntervalMS   int64 `json:"ping_interval_ms,omitempty"`
	PongTimeoutMS    int64 `json:"pong_timeout_ms,omitempty"`
	WriteTimeoutMS   int64 `json:"write_timeout_ms,omitempty"`
	DefaultTimeoutMS int64 `json:"default_timeout_ms,omitempty"`
	// The absolute and idle timeouts of an interactive execution that
	// names none.
	InteractiveTimeoutMS int64 `json:"interactive_timeout_ms,omitempty"`
	IdleTimeoutMS        int64 `json:"idle_timeout_ms,omitempty"`
	// Scrollback is the lines above the screen a snapshot may hold: a
	// terminal that applies snapshots keeps at least that many.
	Scrollback  int   `json:"scrollback,omitempty"`
	RetentionMS int64 `json:"retention_ms,omitempty"`
	// ForwardWindow is the bytes either side may send on a forward
	// stream ahead of credit; MaxStreams the streams a connection may
	// hold open.
	ForwardWindow int `json:"forward_window,omitempty"`
	MaxStreams    int `json:"max_streams,omitempty"`
}

// SnapshotOverhead is the most a snapshot message takes beside its
// data (its other fields, with every number at its longest): a server
// gives a snapshot's data, as JSON text, at most the largest message
// less this.
const SnapshotOverhead = 1024

// ProtocolVersion is the protocol a hello states: v1, grown compatibly
// by the features it lists.
const ProtocolVersion = 1

// Features a hello may list.
const (
	FeatureAck      = "ack"       // attach with ack; the ack request; held output
	FeatureInputAck = "input-ack" // input-ack messages on acknowledging channels
	FeatureSeen     = "seen"      // attach with seen: exact gap bytes after a reconnect
	FeatureFlow     = "flow"      // start with flow and hold_ms
	FeatureSnapshot = "snapshot"  // attach with snapshot: a screen snapshot in place of evicted terminal history
	FeatureRecord   = "record"    // start with record and record_input: this server keeps recordings
	FeatureNodes    = "nodes"     // one node of several: node fields, unavailable with retry_ms, detached with an error
	FeatureNetwork  = "network"   // start with network, the network request: this server has network policies
	FeatureExec     = "exec"      // the exec and write requests (agent exec)
	FeatureForward  = "forward"   // forward streams to executions' ports, the ports listing
)

// Port is a TCP socket a program listens on in its sandbox: its address
// (127.0.0.1, ::1, or a wildcard 0.0.0.0 or ::) and port.
type Port struct {
	Address string `json:"address"`
	Port    int    `json:"port"`
}

// Ends of a forward stream, in forward-end's Reason.
const (
	ForwardClosed    = "closed"    // both sides ended what they send
	ForwardReset     = "reset"     // the program reset or dropped its connection
	ForwardCancelled = "cancelled" // the client reset the stream
	ForwardWindow    = "window"    // the client sent past its credit
)

// Output flows of an execution.
const (
	FlowHold = "hold" // output an acknowledging writer has not acked is held; the program waits
	FlowLive = "live" // the program never waits; slow readers get gaps
)

// Causes of lost output, in a gap's Cause.
const (
	LossReadOnly    = "read_only"    // a read-only viewer never holds output
	LossLive        = "live"         // the execution runs with flow live
	LossHoldExpired = "hold_expired" // no acknowledging writer came back within the hold
	LossUnheld      = "unheld"       // evicted while no acknowledging writer was attached
	LossStopped     = "stopped"      // evicted after the execution was cancelled or timed out
)

// ReasonLost is the reason of an exit event whose execution the server's
// sandbox keeper took with it when it ended: its status is unknown.
const ReasonLost = "lost"

// EventNotice is the event of a notice: Reason (a Notice constant),
// Message for people, and At.
const EventNotice = "notice"

// Reasons of a notice event.
const (
	NoticeTimeout       = "timeout"                // the absolute timeout stops the execution at At
	NoticeIdleTimeout   = "idle_timeout"           // the idle timeout stops it at At, unless input arrives or a writer attaches
	NoticeIdleCancelled = "idle_timeout_cancelled" // input arrived or a writer attached: the idle warning no longer holds
	NoticeNetwork       = "network"                // the network policy refused a connection, or changed
)

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
	MsgHello        = "hello"       // the first message on every connection
	MsgInputAck     = "input-ack"   // input accepted on an acknowledging channel
	MsgSnapshot     = "snapshot"    // a terminal's screen in place of history it no longer holds
	MsgPorts        = "ports"       // the ports a channel's execution listens on, changed
	MsgForwarded    = "forwarded"   // a forward stream is open
	MsgForwardAck   = "forward-ack" // credit for the client on a stream
	MsgForwardEOF   = "forward-eof" // the program ended what it sends on a stream
	MsgForwardEnd   = "forward-end" // a stream is over
	MsgExecResult   = "exec-result" // an agent exec call's answer: Result
)

// ListStatus is what the answer of GET /v1/executions holds beside its
// executions on one node of several: Partial when some nodes did not
// answer in time, and Unreachable names them, sorted. The list is then
// what the nodes that answered hold.
type ListStatus struct {
	Partial     bool     `json:"partial,omitempty"`
	Unreachable []string `json:"unreachable,omitempty"`
}
