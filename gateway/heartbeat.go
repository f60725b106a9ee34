package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/termgate/termgate/gateway/auth"
)

// heartbeat is a connection's ping timer: it pings every PingInterval
// from a timer, not a goroutine of its own, so an idle connection holds
// no stack for it. No pong within PongTimeout closes the connection.
type heartbeat struct {
	ctx      context.Context // the connection's: a ping under way ends with it
	ping     func(context.Context) error
	every    time.Duration // PingInterval
	within   time.Duration // PongTimeout
	timedOut func()        // closes the connection: no pong came

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool           // stop was called: arm no more
	running sync.WaitGroup // the armed timer, or its ping under way
}

// start arms the first ping; stop ends the heartbeat. The fields are
// set before.
func (h *heartbeat) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running.Add(1) // the armed timer's; its beat or a Stop ends it
	h.timer = time.AfterFunc(h.every, h.beat)
}

// beat is one heartbeat: it pings, then arms the next unless the
// connection is ending.
func (h *heartbeat) beat() {
	defer h.running.Done()
	ctx, cancel := context.WithTimeout(h.ctx, h.within)
	err := h.ping(ctx)
	cancel()
	if err != nil && h.ctx.Err() == nil {
		h.timedOut()
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopped && h.ctx.Err() == nil {
		h.running.Add(1)
		h.timer.Reset(h.every)
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
	ahead  time.Duration       // AuthWarning
	warn   func(exp time.Time) // sends the client auth_expiring
	expire func()              // closes the connection with CloseAuthExpired

	mu      sync.Mutex
	warning *time.Timer
	closing *time.Timer
}

// arm calls warn ahead of when the token of claims stops being valid,
// with its expiry, and expire then (at exp plus the leeway, when a new
// connection would be refused too), replacing the timers of an earlier
// token: a reauth moves them. The functions are set before.
func (e *expiry) arm(claims auth.Claims) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopLocked()
	exp, until := claims.ExpiresAt, claims.ValidUntil
	if until.Before(exp) {
		until = exp
	}
	left := time.Until(until)
	e.warning = time.AfterFunc(left-e.ahead, func() { e.warn(exp) })
	e.closing = time.AfterFunc(left, e.expire)
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
