package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/session/internal/statedir"
)

// Errors returned by the Supervisor. The gateway maps each to a stable,
// client-visible code.
var (
	ErrNotFound    = errors.New("session: execution not found")
	ErrGone        = errors.New("session: execution is gone: the restarted server no longer has it")
	ErrConflict    = errors.New("session: execution id already used with a different spec")
	ErrCapacity    = errors.New("session: at capacity")
	ErrInvalidID   = errors.New("session: invalid execution id")
	ErrInvalidSpec = errors.New("session: invalid spec")
	ErrNotRunning  = errors.New("session: execution is not running")
	ErrInputOffset = errors.New("session: input offset is ahead of the input received")
	ErrInputFull   = errors.New("session: input buffer full; retry from the same offset")
	ErrNotPTY      = errors.New("session: execution has no terminal")
	ErrNoPipes     = errors.New("session: execution has no stdin pipe")
	ErrSignal      = errors.New("session: signal not allowed")
	ErrClosed      = errors.New("session: supervisor is closed")
	ErrAfter       = errors.New("session: after is beyond the execution's newest event")
	ErrAck         = errors.New("session: ack beyond the newest event")
	// ErrStateVersion refuses a state directory that holds records of
	// another layout (another termgate's): Restore changes nothing in it.
	ErrStateVersion = statedir.ErrVersion
)

// ErrOutOfDescriptors is the capacity error of a start that ran out of
// file descriptors (EMFILE or ENFILE): the server is full for now, the
// request was fine.
var ErrOutOfDescriptors = fmt.Errorf("%w: the server is out of file descriptors; retry later", ErrCapacity)

// OutOfDescriptors reports whether err comes from running out of file
// descriptors, in the process (EMFILE) or the system (ENFILE).
func OutOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// Status is an execution's lifecycle state. Running is the only one that
// changes; the others are final.
type Status string

// Statuses.
const (
	StatusRunning   Status = "running"
	StatusExited    Status = "exited"
	StatusFailed    Status = "failed" // could not start
	StatusCancelled Status = "cancelled"
	StatusTimedOut  Status = "timed_out"
	StatusLimit     Status = "limit" // a ceiling killed it
)

// Spec is everything that defines an execution. Two starts with the same
// owner and ID are the same execution only when their specs are equal.
type Spec struct {
	Policy sandbox.Policy `json:"policy"`
	// Timeout is the absolute timeout, wall-clock time from start
	// (Config.DefaultTimeout when 0, or Config.DefaultInteractiveTimeout
	// for an interactive execution; negative means none). See timeout.go.
	Timeout time.Duration `json:"timeout"`
	// Interactive: a person works in it, so the idle timeout applies.
	// Every PTY execution is interactive.
	Interactive bool `json:"interactive,omitempty"`
	// IdleTimeout stops an interactive execution once no writer has been
	// attached and no input has arrived for this long
	// (Config.DefaultIdleTimeout when 0; negative means none). A batch
	// execution has none: setting it is ErrInvalidSpec.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// Retention is how long the final result is kept (Config.DefaultRetention).
	Retention time.Duration `json:"retention"`
	// Ring bounds the execution's event history.
	Ring replay.Config `json:"ring"`
	// OutputBudget bounds the final output kept per stream, head plus tail
	// (Config.DefaultOutputBudget).
	OutputBudget int `json:"output_budget"`
	// Live runs the program free: it never waits for a reader, and output
	// nobody read in time is evicted. Otherwise output an acknowledging
	// writer has not acknowledged is held, and the program waits while
	// the ring is full of it (see flow.go).
	Live bool `json:"live,omitempty"`
	// Hold is how long held output waits for an acknowledging writer to
	// come back once none is attached (Config.DefaultHold).
	Hold time.Duration `json:"hold"`
	// Record writes the execution's output and resizes to a recording
	// (recording.go), and its input too with RecordInput. It needs
	// Config.RecordingsDir.
	Record      bool `json:"record,omitempty"`
	RecordInput bool `json:"record_input,omitempty"`
	// Network is the network policy the execution's connections follow
	// (network.go): one of Config.Egress's. Empty for none, when
	// Policy.Network alone decides (none or host).
	Network string `json:"network,omitempty"`
}

// Output is the retained part of one stream, cut on UTF-8 boundaries.
type Output struct {
	Head      []byte `json:"head"`
	Tail      []byte `json:"tail,omitempty"`
	Original  int64  `json:"original_bytes"`
	Retained  int64  `json:"retained_bytes"`
	Omitted   int64  `json:"omitted_bytes"`
	Truncated bool   `json:"truncated"`
}

// Result is an execution's final outcome.
type Result struct {
	Status   Status        `json:"status"`
	ExitCode int           `json:"exit_code"` // -1 without a normal exit
	Signal   string        `json:"signal,omitempty"`
	Reason   string        `json:"reason"`
	Started  time.Time     `json:"started"`
	Ended    time.Time     `json:"ended"`
	Duration time.Duration `json:"duration"`
	Stdout   Output        `json:"stdout"` // the terminal's output for a PTY
	Stderr   Output        `json:"stderr"`
	// Recording says what the recording lacks; nil when not recorded.
	Recording *RecordingResult `json:"recording,omitempty"`
}

// Info describes an execution at one moment.
type Info struct {
	ID       string    `json:"id"`
	Owner    string    `json:"-"`
	Status   Status    `json:"status"`
	PTY      bool      `json:"pty"`
	Started  time.Time `json:"started"`
	FirstSeq uint64    `json:"first_seq"`
	LastSeq  uint64    `json:"last_seq"`
	// InputOffset is how many input bytes the execution has received: a
	// client resends its input from here after a reconnect.
	InputOffset uint64  `json:"input_offset"`
	Result      *Result `json:"result,omitempty"`
	// Incarnation tells this execution from others that had its ID
	// before or will after it (IDs are reused once retention ends).
	Incarnation string `json:"incarnation"`
	Live        bool   `json:"live,omitempty"`
	// Recorded: the execution has a recording
	// (GET /v1/executions/{id}/recording).
	Recorded bool `json:"recorded,omitempty"`
	// Network is the execution's network: its network policy's name now,
	// or the sandbox's network (none or host).
	Network string `json:"network,omitempty"`
	// Cwd is the directory the command started in, inside the sandbox;
	// Workdir is the same directory relative to the workspace, "." for
	// the workspace itself, "" when it lies outside the workspace.
	Cwd     string `json:"cwd,omitempty"`
	Workdir string `json:"-"`
}

// Stats counts executions.
type Stats struct {
	Running      int               `json:"running"`
	Retained     int               `json:"retained"`
	StartedTotal uint64            `json:"started_total"`
	ByStatus     map[Status]uint64 `json:"by_status"`
	// Ended counts the ended executions by status and reason; ByTenant
	// counts executions by tenant, bounded (TenantSeries).
	Ended    map[EndKey]uint64      `json:"-"`
	ByTenant map[string]TenantStats `json:"-"`
	// OutputBytes and InputBytes count the bytes programs wrote and the
	// input they were given (accepted, retries counted once).
	OutputBytes uint64 `json:"output_bytes"`
	InputBytes  uint64 `json:"input_bytes"`
	// FlowWaiting counts the output streams waiting now because readers
	// hold unacknowledged output (flow.go); FlowWaits counts such waits.
	FlowWaiting int    `json:"flow_waiting"`
	FlowWaits   uint64 `json:"flow_waits"`
	// Resumes counts subscriptions by ResumeKinds; ResumeGapBytes the
	// output bytes the gaps of ResumeGap resumes skipped.
	Resumes        map[string]uint64 `json:"resumes"`
	ResumeGapBytes uint64            `json:"resume_gap_bytes"`
	// Refused counts refused starts and inputs by RefusedKinds.
	Refused map[string]uint64 `json:"refused"`
	// StartLatency is the time the launcher took to start each sandbox
	// that started.
	StartLatency Histogram `json:"-"`
}

// Launcher is the subset of *sandbox.Launcher the supervisor uses; tests
// provide a fake.
type Launcher interface {
	Start(ctx context.Context, p sandbox.Policy, stdio sandbox.Stdio) (Process, error)
}

// Process is the subset of *sandbox.Process the supervisor uses.
type Process interface {
	Stdin() io.WriteCloser
	Resize(sandbox.WindowSize) error
	Signal(syscall.Signal) error
	Stop(sandbox.Stop)
	Wait() sandbox.Exit
}

// SandboxLauncher adapts a *sandbox.Launcher to Launcher.
func SandboxLauncher(l *sandbox.Launcher) Launcher { return sandboxLauncher{l} }

type sandboxLauncher struct{ l *sandbox.Launcher }

func (s sandboxLauncher) Start(ctx context.Context, p sandbox.Policy, stdio sandbox.Stdio) (Process, error) {
	proc, err := s.l.Start(ctx, p, stdio)
	if err != nil {
		return nil, err
	}
	return proc, nil
}

// Adopt adopts what an earlier launcher on the same state directory left.
func (s sandboxLauncher) Adopt(ctx context.Context, stdio func(key string) (sandbox.Stdio, bool)) ([]Adopted, error) {
	procs, err := s.l.Adopt(ctx, stdio)
	out := make([]Adopted, 0, len(procs))
	for _, p := range procs {
		out = append(out, p)
	}
	return out, err
}

// Detach lets go of the launcher's processes without stopping them.
func (s sandboxLauncher) Detach() error { return s.l.Detach() }

// signals is the allowlist of signals a client may send.
var signals = map[string]syscall.Signal{
	"INT": syscall.SIGINT, "TERM": syscall.SIGTERM, "HUP": syscall.SIGHUP, "KILL": syscall.SIGKILL,
	"QUIT": syscall.SIGQUIT, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "WINCH": syscall.SIGWINCH,
	"CONT": syscall.SIGCONT, "STOP": syscall.SIGSTOP,
}
