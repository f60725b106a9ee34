//go:build linux

package cgroup

import (
	"fmt"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// BenchmarkCreate makes and removes one execution's group under a
// tenant, with serve's default ceilings for both, as every start does:
// per op, the group's creation (us-create/op) and its removal.
func BenchmarkCreate(b *testing.B) {
	sandboxtest.NeedRoot(b)
	h := Detect(testRoot, sandboxtest.CgroupParent(b))
	ts := NewTenants(h, Limits{MemoryBytes: 4 << 30, Pids: 2048, CPUWeight: 100})
	lim := Limits{MemoryBytes: 1 << 30, Pids: 512, CPUWeight: 100}
	if err := h.checkEnforceable(lim); err != nil {
		b.Skip(err)
	}
	hold, err := ts.Create("bench", "hold", lim) // the tenant's directories stay made
	if err != nil {
		b.Fatal(err)
	}
	defer hold.Remove()
	var create float64
	i := 0
	for b.Loop() {
		i++
		name := fmt.Sprint("b", i)
		start := time.Now()
		c, err := ts.Create("bench", name, lim)
		create += float64(time.Since(start).Nanoseconds()) / 1e3
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Remove(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(create/float64(b.N), "us-create/op")
}
