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
