package session

import "github.com/termgate/termgate/session/screen"

func init() {
	newTerminal = func(cfg screen.Config) terminal { return screen.New(cfg) }
}
