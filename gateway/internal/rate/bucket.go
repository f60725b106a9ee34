// Package rate is the gateway's token bucket, shared by its rate limits
// (the subjects' starts and input) and the audit trail's bound on
// refusal records.
package rate

import (
	"sync"
	"time"
)

// Bucket is a token bucket: rate tokens per second up to burst. It is
// safe for concurrent use.
type Bucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

// NewBucket returns a full bucket of burst tokens, refilled at rate a
// second.
func NewBucket(rate float64, burst int) *Bucket {
	return &Bucket{rate: rate, burst: float64(burst), tokens: float64(burst), last: time.Now()}
}

// Allow takes a token if one is left.
func (b *Bucket) Allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
