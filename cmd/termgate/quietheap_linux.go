package main

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// quietHeap gives the heap the collector holds beyond the live data back
// to the OS when serve turns quiet. The runtime lets the heap grow to
// twice the live data before it collects (GOGC=100) and keeps what it
// freed for reuse; an idle server with thousands of sessions, or with
// thousands just ended, allocates too little to collect again for
// minutes, and holds about twice what it uses meanwhile. So after an
// interval that allocated at least quiet bytes, the first that
// allocated less forces one collection and gives back every free page
// (debug.FreeOSMemory), when the heap holds at least worth. A server
// that stays busy never pays it; one that turns quiet pays one
// collection of its live heap each time, and no more than a share of
// one core: the next release waits spacing times as long as the last
// one took (a large heap's collection takes longer, so it is spaced
// further apart).
type quietHeap struct {
	every   time.Duration
	quiet   uint64 // bytes allocated in every below which an interval is quiet
	worth   uint64 // the least heap worth a release
	spacing int    // a release waits this many times the last one's duration
}

// defaultQuietHeap: 2 s intervals; 1 MiB, about ten sessions opening;
// 4 MiB; releases take at most 5% of a core.
var defaultQuietHeap = quietHeap{every: 2 * time.Second, quiet: 1 << 20, worth: 4 << 20, spacing: 20}

// heapSample is what quietHeap reads of runtime/metrics.
type heapSample struct {
	allocated uint64 // bytes allocated since the process started
	held      uint64 // heap bytes taken from the OS and not given back
}

var heapMetrics = []string{
	"/gc/heap/allocs:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
}

func sampleHeap() heapSample {
	s := make([]metrics.Sample, len(heapMetrics))
	for i, name := range heapMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0 // a runtime without the metric: never worth a release
		}
		return s[i].Value.Uint64()
	}
	return heapSample{allocated: v(0), held: v(1) + v(2) + v(3)}
}

// busy reports whether the interval from prev to cur allocated quiet
// bytes or more.
func (q quietHeap) busy(prev, cur heapSample) bool { return cur.allocated-prev.allocated >= q.quiet }

// release reports whether the heap is worth giving back after an
// interval from prev to cur that followed a busy one.
func (q quietHeap) release(wasBusy bool, prev, cur heapSample) bool {
	return wasBusy && !q.busy(prev, cur) && cur.held >= q.worth
}

// run releases the heap whenever q allows it until ctx ends or the
// returned stop is called, which waits for it.
func (q quietHeap) run(ctx context.Context, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(q.every)
		defer tick.Stop()
		prev, wasBusy := sampleHeap(), false
		var next time.Time // no release before
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			cur := sampleHeap()
			busy := q.busy(prev, cur)
			if q.release(wasBusy, prev, cur) && !time.Now().Before(next) {
				start := time.Now()
				debug.FreeOSMemory()
				took := time.Since(start)
				next = time.Now().Add(time.Duration(q.spacing) * took)
				after := sampleHeap()
				log.Debug("quiet: heap given back", "held_bytes", cur.held, "held_after_bytes", after.held, "took", took.String())
				cur = after
			}
			prev, wasBusy = cur, busy
		}
	}()
	return func() { cancel(); <-done }
}
