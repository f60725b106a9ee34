package main

import (
	"log/slog"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func TestQuietHeapReleasesWhenBusyTurnsQuiet(t *testing.T) {
	t.Parallel()
	q := quietHeap{quiet: 1 << 20, worth: 4 << 20}
	at := func(allocated, held uint64) heapSample { return heapSample{allocated: allocated, held: held} }
	for _, c := range []struct {
		name      string
		wasBusy   bool
		prev, cur heapSample
		want      bool
	}{
		{"quiet after busy", true, at(100<<20, 60<<20), at(100<<20+1000, 60<<20), true},
		{"quiet after quiet", false, at(100<<20, 60<<20), at(100<<20+1000, 60<<20), false},
		{"still busy", true, at(100<<20, 60<<20), at(101<<20, 60<<20), false},
		{"a small heap", true, at(100<<20, 3<<20), at(100<<20, 3<<20), false},
	} {
		if got := q.release(c.wasBusy, c.prev, c.cur); got != c.want {
			t.Errorf("%s: release = %v, want %v", c.name, got, c.want)
		}
	}
}

// forcedCollections counts the collections forced so far.
func forcedCollections() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// garbage allocates 64 MiB and drops it: a busy interval.
func garbage() {
	var keep [][]byte
	for range 64 {
		keep = append(keep, make([]byte, 1<<20))
	}
	runtime.KeepAlive(keep)
}

// TestQuietHeapGivesTheHeapBack: garbage left by a busy interval is
// collected and given back in a quiet one. A release may come too early
// for the test, while garbage still holds its memory: a busy machine can
// stop garbage for longer than an interval, which the loop then sees as
// quiet. So each try makes new garbage, with no spacing to hold the next
// release back. Not parallel: other tests' allocations would keep the
// intervals busy.
func TestQuietHeapGivesTheHeapBack(t *testing.T) {
	q := quietHeap{every: 100 * time.Millisecond, quiet: 1 << 20, worth: 16 << 20}
	before := forcedCollections()
	stop := q.run(t.Context(), slog.New(slog.DiscardHandler))
	defer stop()
	for try := 1; ; try++ {
		garbage()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) && (forcedCollections() == before || sampleHeap().held >= q.worth) {
			time.Sleep(20 * time.Millisecond)
		}
		if forcedCollections() > before && sampleHeap().held < q.worth {
			return
		}
		if try == 5 {
			t.Fatalf("5 tries of 64 MiB turned to garbage, 5 s each: %d forced collections, %d bytes held", forcedCollections()-before, sampleHeap().held)
		}
	}
}

// TestQuietHeapSpacesReleases: after one release, the next waits spacing
// times as long as it took, however quiet the intervals between.
func TestQuietHeapSpacesReleases(t *testing.T) {
	q := quietHeap{every: 100 * time.Millisecond, quiet: 1 << 20, worth: 16 << 20, spacing: 1e6}
	before := forcedCollections()
	stop := q.run(t.Context(), slog.New(slog.DiscardHandler))
	defer stop()
	garbage()
	for deadline := time.Now().Add(10 * time.Second); forcedCollections() == before; {
		if time.Now().After(deadline) {
			t.Fatal("no release 10 s after 64 MiB turned to garbage")
		}
		time.Sleep(20 * time.Millisecond)
	}
	garbage()
	time.Sleep(time.Second) // 10 intervals, a million times the first release's duration away
	if n := forcedCollections() - before; n != 1 {
		t.Errorf("%d forced collections, want 1: the spacing did not hold the second release back", n)
	}
}
