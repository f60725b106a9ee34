//go:build linux

package sandbox

import "github.com/termgate/termgate/sandbox/internal/sandboxinit"

// The init between bwrap and the command is package sandboxinit: this very
// binary, run by bwrap as initPath.
const (
	initPath      = sandboxinit.Path
	initControlFD = sandboxinit.ControlFD
)

// initExecs is how many execs the sandbox's first process makes before it
// runs the command: bwrap's exec of the init.
const initExecs = 1
