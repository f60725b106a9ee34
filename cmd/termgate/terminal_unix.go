//go:build unix

package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/termgate/termgate/gateway/client"
)

// enableVirtualTerminal does nothing: Unix terminals interpret escape
// sequences already.
func enableVirtualTerminal(*os.File) func() { return func() {} }

// followLocalSize sends the local terminal's size on SIGWINCH until the
// returned function is called.
func followLocalSize(ctx context.Context, e *client.Execution, in *os.File) func() {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-winch:
				if s := terminalSize(in); s != nil {
					e.Resize(ctx, s.Rows, s.Cols)
				}
			}
		}
	}()
	return func() { signal.Stop(winch); close(done) }
}
