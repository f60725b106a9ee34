package promtext

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// goSamples are the runtime/metrics the go_* families read; none stops
// the world (runtime.ReadMemStats would).
var goSamples = []string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/stacks:bytes",
	"/memory/classes/os-stacks:bytes",
	"/memory/classes/total:bytes",
	"/gc/heap/allocs:bytes",
	"/gc/heap/allocs:objects",
	"/gc/heap/frees:objects",
	"/gc/heap/tiny/allocs:objects",
	"/gc/heap/objects:objects",
	"/gc/heap/goal:bytes",
	"/gc/gogc:percent",
	"/gc/gomemlimit:bytes",
	"/memory/classes/profiling/buckets:bytes",
	"/memory/classes/metadata/other:bytes",
	"/memory/classes/metadata/mcache/inuse:bytes",
	"/memory/classes/metadata/mcache/free:bytes",
	"/memory/classes/metadata/mspan/inuse:bytes",
	"/memory/classes/metadata/mspan/free:bytes",
	"/memory/classes/other:bytes",
}

// WriteGo writes the Go runtime's families, under the names Prometheus's
// Go collector uses: go_goroutines, go_threads, go_info,
// go_gc_duration_seconds and the go_memstats_* that runtime/metrics
// gives exactly.
func WriteGo(w *Writer) {
	s := make([]metrics.Sample, len(goSamples))
	for i, name := range goSamples {
		s[i].Name = name
	}
	metrics.Read(s)
	v := func(i int) float64 {
		switch s[i].Value.Kind() {
		case metrics.KindUint64:
			return float64(s[i].Value.Uint64())
		case metrics.KindFloat64:
			return s[i].Value.Float64()
		}
		return 0 // a metric this Go does not have, as Prometheus's Go client reads it
	}
	objects, unused, free, released := v(0), v(1), v(2), v(3)
	stacks, osStacks, total := v(4), v(5), v(6)
	allocBytes, allocs, frees, tiny, heapObjects := v(7), v(8), v(9), v(10), v(11)
	goal, gogc, memLimit := v(12), v(13), v(14)
	buckets, gcMeta, mcache, mcacheFree, mspan, mspanFree, other := v(15), v(16), v(17), v(18), v(19), v(20), v(21)

	gc := debug.GCStats{PauseQuantiles: make([]time.Duration, 5)}
	debug.ReadGCStats(&gc)
	var lastGC float64
	if !gc.LastGC.IsZero() {
		lastGC = float64(gc.LastGC.UnixNano()) / 1e9
	}
	w.Family("go_gc_duration_seconds", "Stop-the-world pauses of garbage collections, in seconds: quantiles of the last ones, their sum and count.", Summary)
	for i, q := range []string{"0", "0.25", "0.5", "0.75", "1"} {
		w.Sample("go_gc_duration_seconds", gc.PauseQuantiles[i].Seconds(), "quantile", q)
	}
	w.Sample("go_gc_duration_seconds_sum", gc.PauseTotal.Seconds())
	w.Sample("go_gc_duration_seconds_count", float64(gc.NumGC))
	w.One("go_gc_gogc_percent", "GOGC: the heap growth, in percent, that starts a collection.", Gauge, gogc)
	w.One("go_gc_gomemlimit_bytes", "GOMEMLIMIT: the runtime's soft memory limit, in bytes (math.MaxInt64 when none).", Gauge, memLimit)
	w.One("go_goroutines", "Goroutines now.", Gauge, float64(runtime.NumGoroutine()))
	w.Family("go_info", "The Go version the binary was built with: 1, labelled.", Gauge)
	w.Sample("go_info", 1, "version", runtime.Version())
	w.One("go_memstats_alloc_bytes", "Bytes of heap objects, reachable or not yet swept.", Gauge, objects)
	w.One("go_memstats_alloc_bytes_total", "Bytes ever allocated on the heap.", Counter, allocBytes)
	w.One("go_memstats_buck_hash_sys_bytes", "Bytes of the profiling bucket hash table.", Gauge, buckets)
	w.One("go_memstats_frees_total", "Heap objects ever freed.", Counter, frees+tiny)
	w.One("go_memstats_gc_sys_bytes", "Bytes of the garbage collector's metadata.", Gauge, gcMeta)
	w.One("go_memstats_heap_alloc_bytes", "Bytes of heap objects (as go_memstats_alloc_bytes).", Gauge, objects)
	w.One("go_memstats_heap_idle_bytes", "Heap bytes holding no object, released to the system or not.", Gauge, free+released)
	w.One("go_memstats_heap_inuse_bytes", "Heap bytes in spans that hold objects.", Gauge, objects+unused)
	w.One("go_memstats_heap_objects", "Heap objects now.", Gauge, heapObjects)
	w.One("go_memstats_heap_released_bytes", "Heap bytes given back to the system.", Gauge, released)
	w.One("go_memstats_heap_sys_bytes", "Heap bytes mapped from the system.", Gauge, objects+unused+free+released)
	w.One("go_memstats_last_gc_time_seconds", "When the last garbage collection ended, in seconds since the Unix epoch (0: none yet).", Gauge, lastGC)
	w.One("go_memstats_mallocs_total", "Heap objects ever allocated.", Counter, allocs+tiny)
	w.One("go_memstats_mcache_inuse_bytes", "Bytes of mcache structures in use.", Gauge, mcache)
	w.One("go_memstats_mcache_sys_bytes", "Bytes of mcache structures mapped from the system.", Gauge, mcache+mcacheFree)
	w.One("go_memstats_mspan_inuse_bytes", "Bytes of mspan structures in use.", Gauge, mspan)
	w.One("go_memstats_mspan_sys_bytes", "Bytes of mspan structures mapped from the system.", Gauge, mspan+mspanFree)
	w.One("go_memstats_next_gc_bytes", "The heap size, in bytes, at which the next collection ends.", Gauge, goal)
	w.One("go_memstats_other_sys_bytes", "Bytes of other runtime allocations mapped from the system.", Gauge, other)
	w.One("go_memstats_stack_inuse_bytes", "Bytes of goroutine stacks.", Gauge, stacks)
	w.One("go_memstats_stack_sys_bytes", "Bytes of goroutine and system thread stacks.", Gauge, stacks+osStacks)
	w.One("go_memstats_sys_bytes", "Bytes mapped from the system by the Go runtime, in all.", Gauge, total)
	w.One("go_sched_gomaxprocs_threads", "GOMAXPROCS: threads that run Go code at once.", Gauge, float64(runtime.GOMAXPROCS(0)))
	threads, _ := runtime.ThreadCreateProfile(nil)
	w.One("go_threads", "Operating system threads the runtime has made.", Gauge, float64(threads))
}
