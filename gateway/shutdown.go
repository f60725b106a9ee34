package gateway

// The server ends in one of two ways (PROTOCOL.md, "Restarts"):
//
//   - Shutdown, for good: the executions end (the caller closes the
//     supervisor meanwhile), every attached channel sends what remains of
//     its execution through its exit, and only then is each connection
//     closed with 1001.
//   - Restart: the executions live on in the next server, so every
//     connection is closed at once with 1012, and held long polls are
//     answered 503 with Retry-After; clients reconnect and resume there.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/wire"
)

// RestartRetryAfter is the Retry-After a restarting server sends with its
// 503 answers: about the time a new server takes to come up.
const RestartRetryAfter = 2 * time.Second

// Reasons of the closes that end a server.
const (
	reasonShutdown = "server shutting down"
	reasonRestart  = "server restarting; reconnect and resume"
)

// Shutdown ends the server for good. It admits nothing new (connections,
// long polls, attaches and starts on open connections are refused with
// closed), waits until every attached channel has sent its execution's
// exit (or was detached, or its client left), then closes every
// connection with 1001 and waits for them, all within ctx. Shutdown does
// not end executions: close the supervisor while it waits, so their exits
// reach the clients. When ctx ends first, the connections are closed all
// the same and Shutdown returns context.Cause(ctx).
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopAdmitting(false)
	drained := s.drain(ctx)
	s.closeAll(websocket.StatusGoingAway, reasonShutdown)
	defer s.memory.stop()
	return errors.Join(drained, s.waitConns(ctx))
}

// Restart ends this server while its executions live on for the next one
// (on the same state directory): it admits nothing new, closes every
// connection at once with 1012 (wire.CloseServiceRestart), "reconnect and
// resume", without waiting for exits, and answers held long polls 503 with
// Retry-After. It waits for the connections to close, or for ctx. Call it
// before the HTTP server's Shutdown, so the long polls' answers are
// written before their connections close.
func (s *Server) Restart(ctx context.Context) error {
	s.stopAdmitting(true)
	s.stopPolls(errRestarting)
	s.closeAll(wire.CloseServiceRestart, reasonRestart)
	defer s.memory.stop()
	return s.waitConns(ctx)
}

// stopAdmitting marks the server closing (restarting, for Restart).
func (s *Server) stopAdmitting(restart bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closing {
		s.closing, s.restarting = true, restart
	}
}

// closeAll closes every connection with code and releases the workspaces
// the server opened itself.
func (s *Server) closeAll(code websocket.StatusCode, reason string) {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.close(code, reason)
	}
	if s.ownWorkspaces {
		s.closeWorkspaces.Do(func() { s.cfg.Workspaces.Close() }) // no mounts without quotas: running executions keep their directories
	}
}

// waitConns waits until every connection ended, or ctx.
func (s *Server) waitConns(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// drain waits until no attached channel is left, or ctx.
func (s *Server) drain(ctx context.Context) error {
	s.mu.Lock()
	if s.channels == 0 {
		s.mu.Unlock()
		return nil
	}
	if s.drained == nil {
		s.drained = make(chan struct{})
	}
	drained := s.drained
	s.mu.Unlock()
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("gateway: channels still attached: %w", context.Cause(ctx))
	}
}

// openChannel counts a channel about to be attached, or returns the
// refusal once the server is closing.
func (s *Server) openChannel() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return s.closedErrLocked()
	}
	s.channels++
	return nil
}

// closeCode is the close code and reason of a connection that comes
// while the server is closing.
func (s *Server) closeCode() (websocket.StatusCode, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.restarting {
		return wire.CloseServiceRestart, reasonRestart
	}
	return websocket.StatusGoingAway, reasonShutdown
}

// isRestarting reports whether Restart was called.
func (s *Server) isRestarting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarting
}

// retryAfter adds Retry-After to a 503 of a restarting server.
func (s *Server) retryAfter(w http.ResponseWriter) {
	if s.isRestarting() {
		w.Header().Set("Retry-After", strconv.Itoa(int(RestartRetryAfter/time.Second)))
	}
}

// untilRestart returns a context that ends with ctx or when the server
// restarts (cause errRestarting), for long polls.
func (s *Server) untilRestart(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.polls, func() { cancel(context.Cause(s.polls)) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// admitting returns the refusal of a start once the server is closing.
func (s *Server) admitting() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return s.closedErrLocked()
	}
	return nil
}
