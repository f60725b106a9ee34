//go:build linux

package sandbox

import (
	"fmt"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Limit names a ceiling that ended a process.
type Limit string

// Ceilings that can be detected when they end a process.
const (
	LimitMemory   Limit = "memory"
	LimitPids     Limit = "pids"
	LimitCPU      Limit = "cpu"
	LimitFileSize Limit = "file-size"
)

// Stop says why termgate itself stopped a process.
type Stop string

// Reasons for stopping.
const (
	StopNone    Stop = ""
	StopTimeout Stop = "timeout"
	StopCancel  Stop = "cancel" // the start context ended, or Stop was called
)

// Exit is how a sandboxed process ended. It is reported only after the
// process tree is gone and every output stream reached end of file.
type Exit struct {
	// Code is the exit code of a normal exit, or -1.
	Code int `json:"code"`
	// Signal is the signal that killed the command, or 0.
	Signal syscall.Signal `json:"signal,omitempty"`
	// Limit names the ceiling that killed it, when one did.
	Limit Limit `json:"limit,omitempty"`
	// SetupError is bwrap's own message when the sandbox could not be set
	// up; the command never ran.
	SetupError string `json:"setup_error,omitempty"`
	// NotFound is set with SetupError when the failure was the command not
	// existing in the sandbox.
	NotFound bool `json:"not_found,omitempty"`
	// Stopped says whether termgate stopped it, and why.
	Stopped Stop `json:"stopped,omitempty"`
	// Exact is false when the kernel's process events were unavailable and
	// the status was inferred from bwrap's exit code (signal n shows as
	// 128+n); always for an adopted process, whose events before the
	// adoption nobody saw. An adopted process whose sandbox the previous
	// launcher ended after its command exited reports the command's
	// status that launcher kept with the keeper, not bwrap's.
	Exact bool `json:"exact"`
	// Lost says the keeper died and took the execution with it: how the
	// command ended is unknown.
	Lost bool `json:"lost,omitempty"`
	// Detached says the launcher let go of the process (Detach): it did
	// not end, and a later launcher adopts it. Nothing else is set.
	Detached bool          `json:"detached,omitempty"`
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration"`
}

// Status returns a shell-style status: the code, or 128+n for signal n,
// 127 when the command does not exist, 126 when the sandbox could not be
// set up otherwise, or 255 when the end is unknown (Lost, Detached).
func (e Exit) Status() int {
	switch {
	case e.Lost || e.Detached:
		return 255
	case e.NotFound:
		return 127
	case e.SetupError != "":
		return 126
	case e.Signal != 0:
		return 128 + int(e.Signal)
	}
	return e.Code
}

// Success reports a normal exit with code 0.
func (e Exit) Success() bool {
	return e.SetupError == "" && e.Signal == 0 && e.Code == 0 && !e.Lost && !e.Detached
}

// String describes the exit for people.
func (e Exit) String() string {
	var b strings.Builder
	switch {
	case e.Lost:
		b.WriteString("the keeper ended: execution lost")
	case e.Detached:
		b.WriteString("detached: the execution runs on")
	case e.SetupError != "":
		fmt.Fprintf(&b, "sandbox setup failed: %s", e.SetupError)
	case e.Signal != 0:
		fmt.Fprintf(&b, "killed by signal %s", unix.SignalName(e.Signal))
	default:
		fmt.Fprintf(&b, "exited with code %d", e.Code)
	}
	if e.Limit != "" {
		fmt.Fprintf(&b, " (%s ceiling)", e.Limit)
	}
	if e.Stopped != "" {
		fmt.Fprintf(&b, " (stopped: %s)", e.Stopped)
	}
	return b.String()
}

// exitFacts are the observations an Exit is classified from.
type exitFacts struct {
	outer     unix.WaitStatus // bwrap's own status
	workload  unix.WaitStatus // the command's status from process events
	exact     bool            // workload is known
	kept      bool            // workload is the command's status kept with the keeper (keepCommandExit)
	execed    bool            // the command was executed (not only the init); meaningful when exact
	setupMsg  string          // bwrap's message, when one was seen
	oomKills  int64
	pidsHits  int64
	cpuLimit  bool // a CPU-seconds ceiling was set
	killedUs  bool // termgate sent SIGKILL
	stoppedAs Stop
	// initErr is why the init did not run the command, as it or the
	// launcher said; notFound marks a command that does not exist.
	initErr  string
	notFound bool
	lost     bool // the keeper died before it reported bwrap's status
}

// classify turns facts into an Exit. Without process events it falls back
// to bwrap's status, where bwrap reports signal n as 128+n.
func classify(f exitFacts) Exit {
	e := Exit{Code: -1, Exact: f.exact, Stopped: f.stoppedAs}
	switch {
	case f.lost:
		e.Lost, e.Exact = true, false
		return e
	case f.initErr != "":
		e.SetupError, e.NotFound = f.initErr, f.notFound
	case f.exact && !f.execed && f.killedUs && f.stoppedAs != StopNone && f.setupMsg == "":
		// Stopped before the command ran, which a slow setup allows: the
		// kill ended it, no failure of the sandbox's.
		e.Signal = unix.SIGKILL
	case f.exact && !f.execed:
		e.SetupError = setupMessage(f.setupMsg)
	case (f.exact || f.kept) && f.workload.Signaled():
		e.Signal = f.workload.Signal()
	case f.exact || f.kept:
		e.Code = f.workload.ExitStatus()
	case f.outer.Signaled():
		e.Signal = f.outer.Signal()
	case f.outer.ExitStatus() == 1 && f.setupMsg != "":
		e.SetupError = f.setupMsg
	case f.outer.ExitStatus() > 128 && f.outer.ExitStatus() < 128+65:
		e.Signal = syscall.Signal(f.outer.ExitStatus() - 128)
	default:
		e.Code = f.outer.ExitStatus()
	}
	e.Limit = limitHit(e, f)
	return e
}

func setupMessage(msg string) string {
	if msg == "" {
		return "bwrap exited before running the command"
	}
	return msg
}

func limitHit(e Exit, f exitFacts) Limit {
	if e.Success() || e.SetupError != "" {
		return ""
	}
	switch {
	case f.oomKills > 0:
		return LimitMemory
	case e.Signal == unix.SIGXCPU:
		return LimitCPU
	case e.Signal == unix.SIGXFSZ:
		return LimitFileSize
	case e.Signal == unix.SIGKILL && f.cpuLimit && !f.killedUs:
		// With soft = hard the kernel sends SIGKILL at the CPU ceiling.
		return LimitCPU
	case f.pidsHits > 0:
		return LimitPids
	}
	return ""
}
