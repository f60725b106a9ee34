package cluster

import (
	"sync"
	"time"
)

// DefaultDownFor is how long a node that failed counts as down.
const DefaultDownFor = time.Second

// Health is passive health: a node whose dial failed or whose response
// headers did not come in time after a whole request (PeerFailed) counts
// as down for a while, and requests
// for it meanwhile are answered at once instead of each waiting out its
// own timeout. It never changes membership or rank: a down node keeps
// its executions and its place in Rank. It is safe for concurrent use.
//
// It holds at most one entry per node marked down, dropped once it
// expires, so its size is bounded by the member list.
type Health struct {
	downFor time.Duration

	mu    sync.Mutex
	until map[string]time.Time // node -> end of its down time
}

// NewHealth returns a Health that keeps a failed node down for downFor
// (DefaultDownFor when not positive).
func NewHealth(downFor time.Duration) *Health {
	if downFor <= 0 {
		downFor = DefaultDownFor
	}
	return &Health{downFor: downFor, until: map[string]time.Time{}}
}

// Fail marks node down for the Health's time from now.
func (h *Health) Fail(node string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.until[node] = time.Now().Add(h.downFor)
}

// OK marks node up: it answered.
func (h *Health) OK(node string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.until, node)
}

// Down reports whether node failed less than the Health's time ago.
func (h *Health) Down(node string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	until, ok := h.until[node]
	if ok && !time.Now().Before(until) {
		delete(h.until, node)
		return false
	}
	return ok
}
