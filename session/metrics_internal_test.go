package session

import (
	"testing"
	"time"
)

// TestStartLatencyBuckets: a start lands in the first bucket whose bound
// it does not exceed, or beyond the last.
func TestStartLatencyBuckets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{{time.Millisecond, 0}, {5 * time.Millisecond, 0}, {6 * time.Millisecond, 1}, {300 * time.Millisecond, 6},
		{2 * time.Second, 8}, {3 * time.Second, 9}} {
		var c counters
		c.started(tc.d)
		var st Stats
		c.fill(&st)
		if st.StartLatency.Counts[tc.want] != 1 || st.StartLatency.Count() != 1 || st.StartLatency.Sum != tc.d {
			t.Errorf("%v: %+v, want one sample in bucket %d", tc.d, st.StartLatency, tc.want)
		}
	}
	if len(counters{}.latency) != len(StartLatencyBuckets)+1 {
		t.Fatal("one latency counter per bucket and one beyond")
	}
}
