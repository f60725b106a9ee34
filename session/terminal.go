package session

import "github.com/termgate/termgate/session/screen"

func init() {
	newTerminal = func(rows, cols, scrollback int) terminal {
		return screen.New(screen.Config{Rows: rows, Cols: cols, Scrollback: scrollback})
	}
}
