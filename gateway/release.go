package gateway

import (
	"runtime/debug"
	"sync"
	"time"
)

// Closed connections leave their memory to the Go heap, which returns
// free pages to the OS only lazily: after 500 connections closed, an idle
// server's RSS stayed where it was (no allocation, so no GC to lower the
// heap goal the scavenger works towards). memoryRelease returns it once
// many connections closed, after the burst of closes.
const (
	// releaseAfterCloses is how many connections must close (about 40 kB
	// each) before their memory is worth a forced GC.
	releaseAfterCloses = 64
	// releaseDelay lets a burst of closes finish first; it also bounds the
	// releases to one per delay under any churn.
	releaseDelay = 2 * time.Second
)

// memoryRelease counts closed connections and returns free memory to
// the OS, at most once per delay, when after of them closed.
type memoryRelease struct {
	after int
	delay time.Duration
	free  func() // debug.FreeOSMemory; a test counts instead

	mu     sync.Mutex
	closes int         // connections closed since the last release
	timer  *time.Timer // the release armed; nil when none is
}

func newMemoryRelease() *memoryRelease {
	return &memoryRelease{after: releaseAfterCloses, delay: releaseDelay, free: debug.FreeOSMemory}
}

// closed counts a closed connection and arms a release once enough did.
func (r *memoryRelease) closed() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closes++
	if r.closes >= r.after && r.timer == nil {
		r.timer = time.AfterFunc(r.delay, r.release)
	}
}

func (r *memoryRelease) release() {
	r.mu.Lock()
	r.closes, r.timer = 0, nil
	r.mu.Unlock()
	r.free()
}

// stop disarms a release not yet started.
func (r *memoryRelease) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil && r.timer.Stop() {
		r.timer = nil
	}
}
