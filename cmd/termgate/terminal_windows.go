package main

import (
	"context"
	"os"
	"time"

	"github.com/termgate/termgate/gateway/client"
	"golang.org/x/sys/windows"
)

// enableVirtualTerminal lets the console interpret the escape sequences
// the remote terminal writes (colours, cursor moves) instead of printing
// them, and returns what restores its mode. Consoles without the mode
// (before Windows 10) are left as they are.
func enableVirtualTerminal(f *os.File) func() {
	h := windows.Handle(f.Fd())
	var mode uint32
	if windows.GetConsoleMode(h, &mode) != nil {
		return func() {}
	}
	if windows.SetConsoleMode(h, mode|windows.ENABLE_VIRTUAL_TERMINAL_PROCESSING|windows.DISABLE_NEWLINE_AUTO_RETURN) != nil {
		return func() {}
	}
	return func() { windows.SetConsoleMode(h, mode) }
}

// sizePoll is how often the console's size is checked: Windows has no
// SIGWINCH.
const sizePoll = 250 * time.Millisecond

// followLocalSize sends the console's size when it changes, until the
// returned function is called.
func followLocalSize(ctx context.Context, e *client.Execution, in *os.File) func() {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(sizePoll)
		defer t.Stop()
		last := *terminalSize(in)
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if s := terminalSize(in); *s != last {
					last = *s
					e.Resize(ctx, s.Rows, s.Cols)
				}
			}
		}
	}()
	return func() { close(done) }
}
