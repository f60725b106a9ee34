package replay

import (
	"testing"
	"unsafe"
)

// mode is a storage that the tests of a ring run against: the Go heap, or
// memory given in Config.Memory (a backed ring).
type mode struct {
	name   string
	backed bool
}

var modes = []mode{{"memory", false}, {"backed", true}}

// eachMode runs f as a subtest for each mode.
func eachMode(t *testing.T, f func(t *testing.T, m mode)) {
	t.Helper()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { f(t, m) })
	}
}

// new returns an empty ring bounded by cfg, backed by fresh memory of its
// own in the backed mode.
func (m mode) new(cfg Config) *Ring {
	if m.backed && cfg.Memory == nil {
		cfg.Memory = memoryFor(cfg)
	}
	return New(cfg)
}

// filled returns a ring with cfg holding evs, failing the test on any
// Append error.
func (m mode) filled(t *testing.T, cfg Config, evs ...Event) *Ring {
	t.Helper()
	r := m.new(cfg)
	for i, ev := range evs {
		if _, err := r.Append(ev); err != nil {
			t.Fatalf("append %d (%s): %v", i, ev.Kind, err)
		}
	}
	return r
}

// memoryFor returns zeroed, 8-byte aligned memory for a ring bounded by
// cfg.
func memoryFor(cfg Config) []byte {
	n := MemorySize(cfg)
	words := make([]uint64, n/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
}
