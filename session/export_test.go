package session

import (
	"regexp"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/session/execid"
	"github.com/termgate/termgate/session/internal/statedir"
	"github.com/termgate/termgate/session/screen"
)

// What the external tests (package session_test, which can use the
// sessiontest fake) look at inside a supervisor.

// RingStats returns the event ring's statistics of an execution.
func RingStats(s *Supervisor, owner, id string) replay.Stats {
	e, _ := s.lookup(owner, id)
	return e.ring.Stats()
}

// IDPattern is what an execution id must match.
var IDPattern = regexp.MustCompile(execid.Pattern)

// ConfigOf returns the configuration s runs with, defaults applied.
func ConfigOf(s *Supervisor) Config { return s.Config() }

// Terminal is the emulator interface the supervisor uses.
type Terminal = terminal

// SetNewTerminal replaces the emulator constructor until restore is
// called. Tests that use it must not run in parallel with other tests.
func SetNewTerminal(f func(rows, cols, scrollback int) Terminal) (restore func()) {
	old := newTerminal
	newTerminal = func(c screen.Config) terminal { return f(c.Rows, c.Cols, c.Scrollback) }
	return func() { newTerminal = old }
}

// DirKey names the state directory of owner's execution id.
func DirKey(owner, id string) string { return statedir.DirKey(owner, id) }

// SetMakeHook makes f run as each new execution starts being made, until
// restore is called. Tests that use it must not run in parallel with
// other tests.
func SetMakeHook(f func(owner, id string)) (restore func()) {
	old := makeHook
	makeHook = f
	return func() { makeHook = old }
}

// FileBlocks is the 512-byte blocks a file holds.
var FileBlocks = fileBlocks

// WaitRecorder waits for the recorder of an execution, if any, to close
// its file.
func WaitRecorder(s *Supervisor, owner, id string) {
	e, _ := s.lookup(owner, id)
	e.waitRecorder()
}

// ScreenReserved is the memory terminal emulators have reserved.
func (s *Supervisor) ScreenReserved() int { return s.screens.reserved() }
