package main

import (
	"os"

	"github.com/termgate/termgate/gateway/wire"
	"golang.org/x/term"
)

// isTerminal reports whether f is a terminal (a console on Windows).
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// makeRaw puts the terminal in raw mode (as cfmakeraw does; on Windows,
// console input with virtual-terminal sequences) and returns what undoes
// it. With a terminal, keys such as Ctrl-C reach the remote command.
func makeRaw(f *os.File) (func(), error) {
	fd := int(f.Fd())
	old, err := term.MakeRaw(fd)
	if err != nil {
		return nil, err
	}
	restoreOutput := enableVirtualTerminal(os.Stdout)
	return func() {
		restoreOutput()
		term.Restore(fd, old)
	}, nil
}

// terminalSize is in's size, or 24x80 when it has none.
func terminalSize(in *os.File) *wire.Size {
	if in != nil {
		if cols, rows, err := term.GetSize(int(in.Fd())); err == nil && rows > 0 && cols > 0 {
			return &wire.Size{Rows: rows, Cols: cols}
		}
	}
	return &wire.Size{Rows: 24, Cols: 80}
}
