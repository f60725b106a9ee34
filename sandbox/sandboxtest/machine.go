package sandboxtest

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// MachineBusy is the machine's busy CPU time since boot: every state of
// /proc/stat's first line but idle and iowait, at USER_HZ (10 ms)
// resolution. Benchmarks take the difference over a run, which counts
// the kernel's namespace teardown on threads of its own that no
// process's usage shows: a figure for a quiet machine.
func MachineBusy(t testing.TB) time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	var ticks int64
	for i, f := range strings.Fields(line)[1:] { // user nice system idle iowait irq softirq steal ...
		if i != 3 && i != 4 {
			n, _ := strconv.ParseInt(f, 10, 64)
			ticks += n
		}
	}
	return time.Duration(ticks) * time.Second / 100
}
