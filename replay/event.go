package replay

import (
	"fmt"
	"strconv"
	"time"
)

// Kind says what an Event records.
type Kind uint8

// The kinds of event, in the order they usually happen.
const (
	KindStarted     Kind = iota + 1 // the process started; Rows/Cols set for a PTY, zero for pipes
	KindOutput                      // Stream, Offset, Data
	KindResize                      // Rows, Cols
	KindStdinClosed                 // no payload
	KindSignal                      // Signal: the signal number sent
	KindExit                        // Exit set; always the last event
	KindNotice                      // Notice set: a message for people, e.g. that a timeout is near
)

var kindNames = [...]string{
	KindStarted:     "started",
	KindOutput:      "output",
	KindResize:      "resize",
	KindStdinClosed: "stdin-closed",
	KindSignal:      "signal",
	KindExit:        "exit",
	KindNotice:      "notice",
}

// String returns the kind's wire name, e.g. "stdin-closed".
func (k Kind) String() string {
	if k.valid() {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

func (k Kind) valid() bool { return k >= KindStarted && k <= KindNotice }

// Stream names the output a KindOutput event came from.
type Stream uint8

// The streams. A PTY merges stdout and stderr into one stream.
const (
	StreamPTY Stream = iota + 1
	StreamStdout
	StreamStderr
)

var streamNames = [...]string{StreamPTY: "pty", StreamStdout: "stdout", StreamStderr: "stderr"}

// String returns the stream's wire name, e.g. "stdout".
func (s Stream) String() string {
	if s.valid() {
		return streamNames[s]
	}
	return "stream(" + strconv.Itoa(int(s)) + ")"
}

func (s Stream) valid() bool { return s >= StreamPTY && s <= StreamStderr }

// ExitInfo is the payload of KindExit.
type ExitInfo struct {
	Code     int           `json:"code"`             // -1 when killed by a signal or never started
	Signal   int           `json:"signal,omitempty"` // the signal that killed the process, if any
	Reason   string        `json:"reason"`           // e.g. "exited", "cancelled", "timed_out", "limit:memory", "failed"
	Duration time.Duration `json:"duration"`         // from start to exit
}

// NoticeInfo is the payload of KindNotice: something readers should
// know, such as a timeout about to stop the execution.
type NoticeInfo struct {
	Reason  string    `json:"reason"`      // stable, for programs: e.g. "timeout", "idle_timeout"
	Message string    `json:"message"`     // for people
	At      time.Time `json:"at,omitzero"` // when what it announces happens; zero when nothing is due
}

// Event is one entry of a Ring. The ring sets Seq, Offset and (when zero)
// Time; the other fields are the caller's, and only those of its Kind may
// be set. Data, Exit and Notice are owned by the ring and must not be modified by
// readers.
//
// The fields are ordered so the small ones share a word: a ring holds up
// to MaxEvents of these, and this saves 16 of 112 bytes each.
type Event struct {
	Seq    uint64 // 1 for the first event, then +1 for each
	Kind   Kind
	Stream Stream // output only
	Rows   uint16 // started (PTY) and resize
	Cols   uint16 // started (PTY) and resize
	Time   time.Time
	Offset uint64 // output: byte offset of Data[0] within its stream (each stream counts from 0)
	Data   []byte // output: never empty
	Signal int    // signal: the signal number sent
	Exit   *ExitInfo
	Notice *NoticeInfo
}

// check rejects events the ring cannot number or that carry fields of
// another kind, so a mistake in the caller surfaces at once instead of as
// a confused reader. Offset is not checked: the ring overwrites it.
func (ev *Event) check() error {
	k := ev.Kind
	switch {
	case ev.Seq != 0:
		return invalid(k, "sequence set by caller")
	case !k.valid():
		return invalid(k, "unknown kind")
	case k == KindOutput && (!ev.Stream.valid() || len(ev.Data) == 0):
		return invalid(k, "needs a stream and data")
	case k != KindOutput && (ev.Stream != 0 || len(ev.Data) != 0):
		return invalid(k, "stream or data set")
	case k == KindResize && (ev.Rows == 0 || ev.Cols == 0):
		return invalid(k, "needs rows and cols")
	case k == KindStarted && (ev.Rows == 0) != (ev.Cols == 0):
		return invalid(k, "needs both rows and cols or neither")
	case k != KindResize && k != KindStarted && (ev.Rows != 0 || ev.Cols != 0):
		return invalid(k, "rows or cols set")
	case (k == KindSignal) != (ev.Signal > 0) || ev.Signal < 0:
		return invalid(k, "signal must be set exactly on a signal event")
	case (k == KindExit) != (ev.Exit != nil):
		return invalid(k, "exit info must be set exactly on an exit event")
	case (k == KindNotice) != (ev.Notice != nil):
		return invalid(k, "notice info must be set exactly on a notice event")
	case k == KindNotice && ev.Notice.Reason == "":
		return invalid(k, "needs a reason")
	}
	return nil
}

func invalid(k Kind, why string) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, k, why)
}
