package gateway

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/internal/rate"
)

// subjectLimits keeps a token bucket per (tenant, subject). A bucket unused
// for as long as it takes to refill is full, the same as a new one, so
// such buckets are dropped whenever the map has doubled: memory follows
// the subjects active lately, not every subject ever seen.
type subjectLimits struct {
	rate   float64
	burst  int
	refill time.Duration

	mu    sync.Mutex
	m     map[string]*subjectBucket
	sweep int // the size at which idle buckets are dropped next

	refused atomic.Uint64 // requests allow refused (metrics.go)
}

type subjectBucket struct {
	*rate.Bucket
	used time.Time
}

const minSubjectSweep = 1024

// InputBurstSeconds is the default input burst (Config.InputBurst), in
// seconds of Config.InputPerSecond: at the default 1000 messages a second,
// 16,000 messages at once. Humans type 30 keys a second at most and
// termgate's clients send at most 50 frames a second per channel, so only
// a client sending a message per keystroke or per line draws on the burst:
// a 1 MiB paste cut into 80-byte lines (13,108 messages), or 19,000
// keystrokes sent as fast as their echo returns (7,000 a second here)
// before the sustained rate paces them. The burst refills in 16 s; a client
// that keeps on sending faster than the rate is refused, with the input
// offset to resend from, the rest of the time.
const InputBurstSeconds = 16

// newInputLimits limits a subject's input messages to perSecond, with
// bursts of burst.
func newInputLimits(perSecond, burst int) *subjectLimits {
	return newSubjectLimits(float64(perSecond), max(burst, 1))
}

// ResizeBurstSeconds is the default burst of resize and signal requests
// (Config.ResizeBurst), in seconds of Config.ResizesPerSecond: at the
// default 30 a second, 300 at once. termgate's browser client sends a
// resize at most every 150 ms per terminal; the CLI one per SIGWINCH,
// which a terminal emulator raises at most once a frame while its window
// is dragged: 60 a second, so a drag of 10 s before the sustained rate
// paces it, and ten windows retiled at once several times a second.
// Each accepted resize reaches the terminal at once or, within a burst on
// one execution, as its last size (session.Supervisor.Resize).
const ResizeBurstSeconds = 10

// newResizeLimits limits a subject's resize and signal requests to
// perSecond, with bursts of burst.
func newResizeLimits(perSecond, burst int) *subjectLimits {
	return newSubjectLimits(float64(perSecond), max(burst, 1))
}

func newSubjectLimits(rate float64, burst int) *subjectLimits {
	refill := time.Duration(float64(burst) / rate * float64(time.Second))
	return &subjectLimits{rate: rate, burst: burst, refill: refill, m: map[string]*subjectBucket{}, sweep: minSubjectSweep}
}

// allow takes a token from c's subject's bucket if one is left.
func (l *subjectLimits) allow(c auth.Claims) bool {
	key := c.Tenant + "\x00" + c.Subject
	now := time.Now()
	l.mu.Lock()
	b, ok := l.m[key]
	if !ok {
		if len(l.m) >= l.sweep {
			l.dropIdle(now)
		}
		b = &subjectBucket{Bucket: rate.NewBucket(l.rate, l.burst)}
		l.m[key] = b
	}
	b.used = now
	l.mu.Unlock()
	if !b.Allow() {
		l.refused.Add(1) // metrics.go
		return false
	}
	return true
}

// dropIdle removes the buckets that have refilled. Called with l.mu held.
func (l *subjectLimits) dropIdle(now time.Time) {
	for k, b := range l.m {
		if now.Sub(b.used) >= l.refill {
			delete(l.m, k)
		}
	}
	l.sweep = max(minSubjectSweep, 2*len(l.m))
}
