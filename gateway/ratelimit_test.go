package gateway

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/termgate/termgate/gateway/auth"
)

// defaultInputLimits are a server's input limits at the default Config.
func defaultInputLimits() *subjectLimits {
	var c Config
	applyDefaults(&c)
	return newInputLimits(c.InputPerSecond, c.InputBurst)
}

// sendAt offers n input messages, one every gap (all at once when gap is
// 0), and returns how many the limits refused.
func sendAt(l *subjectLimits, c auth.Claims, n int, gap time.Duration) (refused int) {
	for range n {
		if !l.allow(c) {
			refused++
		}
		if gap > 0 {
			time.Sleep(gap)
		}
	}
	return refused
}

// TestInputLimitsTakeTypingAndPastes: at the defaults, no input a person
// or an editor sends is refused: a typist at 30 keys a second for a
// minute, a 1 MiB paste sent a line (80 bytes) a message at once, and a
// run of keystrokes sent as fast as their echo returns (7,000 a second).
func TestInputLimitsTakeTypingAndPastes(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		gap  time.Duration
	}{
		{"typist 30/s for a minute", 30 * 60, time.Second / 30},
		{"1 MiB paste of 80-byte lines", (1<<20 + 79) / 80, 0},
		{"echo-speed keystrokes for 2 s", 14_000, time.Second / 7000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := defaultInputLimits()
				if n := sendAt(l, auth.Claims{Tenant: "acme", Subject: "ann"}, tc.n, tc.gap); n != 0 {
					t.Fatalf("refused %d of %d messages", n, tc.n)
				}
			})
		})
	}
}

// TestInputLimitsPaceAFlood: a client sending 100,000 messages a second
// for 20 s gets the burst and then the sustained rate, no more; its
// subject's limits do not touch another subject's.
func TestInputLimitsPaceAFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := defaultInputLimits()
		flood, other := auth.Claims{Tenant: "acme", Subject: "bot"}, auth.Claims{Tenant: "acme", Subject: "ann"}
		const seconds, perMS = 20, 100
		accepted := 0
		for range seconds * 1000 {
			accepted += perMS - sendAt(l, flood, perMS, 0)
			time.Sleep(time.Millisecond)
		}
		most := InputBurstSeconds*DefaultInputPerSecond + seconds*DefaultInputPerSecond + 1
		if accepted > most || accepted < most-DefaultInputPerSecond {
			t.Fatalf("accepted %d of %d, want the burst and the rate: at most %d", accepted, seconds*1000*perMS, most)
		}
		if n := sendAt(l, other, 100, 0); n != 0 {
			t.Fatalf("another subject: %d of 100 refused", n)
		}
		if got := l.refused.Load(); got != uint64(seconds*1000*perMS-accepted) {
			t.Fatalf("refused counter %d, want %d", got, seconds*1000*perMS-accepted)
		}
	})
}

// TestInputBurstIsConfigurable: Config.InputBurst, when set, is the burst.
func TestInputBurstIsConfigurable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newInputLimits(1, 3)
		if n := sendAt(l, auth.Claims{Subject: "ann"}, 5, 0); n != 2 {
			t.Fatalf("refused %d of 5 at a burst of 3", n)
		}
	})
}

// TestResizeLimitsTakeDraggingAWindow: at the defaults, a person is never
// refused: a terminal that sends a resize a frame (60 a second) while its
// window is dragged for 8 s, and ten windows retiled at once twice a
// second for a minute.
func TestResizeLimitsTakeDraggingAWindow(t *testing.T) {
	var c Config
	applyDefaults(&c)
	for _, tc := range []struct {
		name       string
		n, perTick int
		gap        time.Duration
	}{
		{"a resize a frame for 8 s", 8 * 60, 1, time.Second / 60},
		{"ten windows retiled twice a second for a minute", 120, 10, time.Second / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newResizeLimits(c.ResizesPerSecond, c.ResizeBurst)
				refused := 0
				for range tc.n {
					refused += sendAt(l, auth.Claims{Tenant: "acme", Subject: "ann"}, tc.perTick, 0)
					time.Sleep(tc.gap)
				}
				if refused != 0 {
					t.Fatalf("refused %d of %d resizes", refused, tc.n*tc.perTick)
				}
			})
		})
	}
}
