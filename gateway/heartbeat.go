package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/termgate/termgate/gateway/wire"
)

// heartbeat is a connection's ping timer: it pings every PingInterval
// from a timer, not a goroutine of its own, so an idle connection holds
// no stack for it. No pong within PongTimeout closes the connection.
type heartbeat struct {
	c       *conn
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool           // stop was called: arm no more
	running sync.WaitGroup // the armed timer, or its ping under way
}

// start arms the first ping; stop ends the heartbeat.
func (h *heartbeat) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running.Add(1) // the armed timer's; its ping or a Stop ends it
	h.timer = time.AfterFunc(h.c.s.cfg.PingInterval, h.ping)
}

// ping is one heartbeat: it pings, then arms the next unless the
// connection is ending.
func (h *heartbeat) ping() {
	defer h.running.Done()
	c := h.c
	ctx, cancel := context.WithTimeout(c.ctx, c.s.cfg.PongTimeout)
	err := c.ws.Ping(ctx)
	cancel()
	if err != nil && c.ctx.Err() == nil {
		c.close(wire.CloseHeartbeatTimeout, "no pong")
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopped && c.ctx.Err() == nil {
		h.running.Add(1)
		h.timer.Reset(c.s.cfg.PingInterval)
	}
}

// stop stops the timer and waits for a ping under way (its context ends
// with the connection's).
func (h *heartbeat) stop() {
	h.mu.Lock()
	h.stopped = true
	if h.timer.Stop() {
		h.running.Done() // it will not fire
	}
	h.mu.Unlock()
	h.running.Wait()
}

// expiry is a connection's token expiry: a warning timer and a closing
// one. The read loop arms it (greet, reauth) and stops it (finish).
type expiry struct {
	mu      sync.Mutex
	warning *time.Timer
	closing *time.Timer
}

// arm warns the client AuthWarning before its token stops being valid
// and closes with CloseAuthExpired then (at exp plus the leeway, when a
// new connection would be refused too), replacing the timers of an
// earlier token: a reauth moves them.
func (e *expiry) arm(c *conn) {
	claims := c.currentClaims()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopLocked()
	exp, until := claims.ExpiresAt, claims.ValidUntil
	if until.Before(exp) {
		until = exp
	}
	left := time.Until(until)
	e.warning = time.AfterFunc(left-c.s.cfg.AuthWarning, func() {
		c.send(wire.Message{Type: wire.MsgAuthExpiring, ExpiresAt: exp.UTC().Format(time.RFC3339)})
	})
	e.closing = time.AfterFunc(left, func() { c.close(wire.CloseAuthExpired, "token expired") })
}

// stop stops the timers.
func (e *expiry) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopLocked()
}

func (e *expiry) stopLocked() {
	if e.warning != nil {
		e.warning.Stop()
		e.closing.Stop()
	}
}
