package wire

import "time"

// Agent exec: a start (or a continue) and a wait for its output as text,
// in one call (PROTOCOL.md, "Agent exec"). Over HTTP the bodies are
// those of POST /v1/exec and POST /v1/executions/{id}/write; over the
// WebSocket they ride in a Request of TypeExec or TypeWrite, answered by a
// Message of MsgExecResult.

// Bounds and defaults of an agent exec's wait and text.
const (
	DefaultYieldMS        = 10_000
	MaxYieldMS            = 60_000
	DefaultMaxOutputBytes = 64 << 10
	MaxMaxOutputBytes     = 1 << 20
)

// ExecRequest starts an execution (or continues the one ID names) and
// waits for it. Argv or Command say what runs: Argv[0] is a program the
// server allows and the rest its arguments; Command is a shell command,
// run by /bin/sh -c. ID alone continues an execution.
type ExecRequest struct {
	ID      string            `json:"id,omitempty"`
	Argv    []string          `json:"argv,omitempty"`
	Command string            `json:"command,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// TTY runs the command on a terminal of Rows x Cols (24 x 80 when
	// unset); its output is then stripped of escape sequences unless
	// StripANSI says otherwise.
	TTY  bool `json:"tty,omitempty"`
	Rows int  `json:"rows,omitempty"`
	Cols int  `json:"cols,omitempty"`
	// Interactive keeps the input of a command without TTY open for
	// writes (a terminal's always is); otherwise it reads end of file.
	Interactive bool    `json:"interactive,omitempty"`
	TimeoutMS   int64   `json:"timeout_ms,omitempty"`
	Limits      *Limits `json:"limits,omitempty"`
	Network     string  `json:"network,omitempty"`
	// Start options as a start's (Request), but for the result's output
	// budget, which is ResultMaxOutputBytes here: MaxOutputBytes bounds
	// the answer's text.
	WorkspaceReadOnly    bool     `json:"workspace_read_only,omitempty"`
	Mounts               []string `json:"mounts,omitempty"`
	Proc                 string   `json:"proc,omitempty"`
	ResultMaxOutputBytes int      `json:"result_max_output_bytes,omitempty"`
	RetentionMS          int64    `json:"retention_ms,omitempty"`
	// Stdin is written first (at input offset 0, so a retried exec does
	// not write it twice); CloseStdin then closes the input.
	Stdin      string `json:"stdin,omitempty"`
	CloseStdin bool   `json:"close_stdin,omitempty"`
	Wait
}

// WriteRequest writes input to an execution and waits for what follows.
// Offset, when set, is the input offset Input starts at: a retry sends the
// same and nothing is written twice. Without it Input is appended to
// what the execution received.
type WriteRequest struct {
	Input      string  `json:"input"`
	Offset     *uint64 `json:"offset,omitempty"`
	CloseStdin bool    `json:"close_stdin,omitempty"`
	Wait
}

// Wait says how an agent exec call waits and what text it returns.
type Wait struct {
	// YieldMS is the longest wait (DefaultYieldMS when nil, at most
	// MaxYieldMS): the call returns when the execution exits or this
	// passes, whichever is first.
	YieldMS *int64 `json:"yield_ms,omitempty"`
	// MaxOutputBytes bounds Output (DefaultMaxOutputBytes when 0, at most
	// MaxMaxOutputBytes): past it the output's head and tail are kept.
	MaxOutputBytes int `json:"max_output_bytes,omitempty"`
	// StripANSI removes escape sequences (default: on a terminal only).
	StripANSI *bool `json:"strip_ansi,omitempty"`
	// Seq, when set, is the first event to read: the NextSeq of the answer
	// before, sent again by a retry. Zero continues where the last answer
	// for the execution left off.
	Seq uint64 `json:"seq,omitempty"`
}

// Yield is how long a call waits at most: YieldMS, DefaultYieldMS when
// nil, within 0 and MaxYieldMS.
func (w Wait) Yield() time.Duration {
	ms := int64(DefaultYieldMS)
	if w.YieldMS != nil {
		ms = min(max(*w.YieldMS, 0), MaxYieldMS)
	}
	return time.Duration(ms) * time.Millisecond
}

// ExecResult answers an agent exec call.
type ExecResult struct {
	ID      string `json:"id"`
	Running bool   `json:"running"`
	// Exit is set once the execution has ended.
	Exit *ExecExit `json:"exit,omitempty"`
	// Output is the text of stdout and stderr in the order written, as
	// UTF-8: bytes that are not are replaced by U+FFFD, counted in
	// ReplacedBytes. OmittedBytes were left out at byte OmittedAt of it
	// to keep it within MaxOutputBytes; LostBytes are output the
	// execution's history no longer held when this call read it.
	Output        string `json:"output"`
	OmittedBytes  int64  `json:"omitted_bytes"`
	OmittedAt     int    `json:"omitted_at,omitempty"`
	ReplacedBytes int64  `json:"replaced_bytes,omitempty"`
	LostBytes     uint64 `json:"lost_bytes,omitempty"`
	// FromSeq is the first event this answer read, NextSeq the next call's.
	FromSeq uint64 `json:"from_seq"`
	NextSeq uint64 `json:"next_seq"`
	// InputOffset is the input the execution has received.
	InputOffset uint64 `json:"input_offset"`
	Incarnation string `json:"incarnation"`
}

// ExecExit is how an execution ended: its exit code, or the signal that
// ended it, and why (a Reason constant).
type ExecExit struct {
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"`
	Reason string `json:"reason"`
}
