//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// BenchmarkPTYThroughputABBA compares a PTY's output with bwrap forked
// by the launcher and by the keeper in one loop, in the order exec,
// keeper, keeper, exec, so that a machine whose load drifts (other tests
// run beside) weighs on both alike. It reports each side's MiB/s, their
// ratio and the launcher's CPU per run.
func BenchmarkPTYThroughputABBA(b *testing.B) {
	ls := benchLaunchers(b)
	p := Policy{Command: sh(fmt.Sprintf("stty raw -echo; head -c %d /dev/zero", ptyBenchBytes)), Workspace: sandboxtest.Dir(b), TTY: &WindowSize{Rows: 24, Cols: 80}}
	var wall, cpu [2]time.Duration
	runs := 0
	for b.Loop() {
		for _, k := range []int{0, 1, 1, 0} {
			w, c := ptyRun(b, ls[k].l, p)
			wall[k] += w
			cpu[k] += c
		}
		runs += 2
	}
	mibs := func(d time.Duration) float64 { return float64(runs) * ptyBenchBytes / d.Seconds() / (1 << 20) }
	b.ReportMetric(mibs(wall[0]), "exec-MiB/s")
	b.ReportMetric(mibs(wall[1]), "keeper-MiB/s")
	b.ReportMetric(mibs(wall[1])/mibs(wall[0]), "keeper/exec")
	b.ReportMetric(float64(cpu[0].Microseconds())/float64(runs)/1000, "exec-cpu-ms/run")
	b.ReportMetric(float64(cpu[1].Microseconds())/float64(runs)/1000, "keeper-cpu-ms/run")
}

// ptyRun runs p once through l into a circular buffer with Write and
// returns the wall time and the CPU the test process spent.
func ptyRun(b *testing.B, l *Launcher, p Policy) (wall, cpu time.Duration) {
	c := &circular{buf: make([]byte, 1<<20)}
	p.Key = randomName()
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	start := time.Now()
	proc, err := l.Start(context.Background(), p, Stdio{Stdout: writeOnly{c}})
	if err != nil {
		b.Fatal(err)
	}
	exit := proc.Wait()
	wall = time.Since(start)
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	proc.Release()
	if !exit.Success() || c.total != ptyBenchBytes {
		b.Fatalf("%s, %d bytes", exit, c.total)
	}
	cpu = time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	return wall, cpu
}

// BenchmarkStartKeeperLimits is BenchmarkStart/paired-keeper with
// serve's default ceilings, as serve starts an execution: a start through
// a keeper and a plain bwrap per iteration, in turns first.
func BenchmarkStartKeeperLimits(b *testing.B) {
	l := keeperLauncher(b, keeperDir(b))
	p := benchPolicy
	p.Workspace = sandboxtest.Dir(b)
	p.Limits = Limits{Memory: 1 << 30, Pids: 512, FileSize: 1 << 30, CPUWeight: 100}
	np := p.Normalize()
	var ours, plain, ratios []float64
	for i := 0; b.Loop(); i++ {
		var t, w float64
		if i%2 == 0 {
			t, w = startFirstByte(b, l, p), plainFirstByte(b, l, np)
		} else {
			w, t = plainFirstByte(b, l, np), startFirstByte(b, l, p)
		}
		ours, plain, ratios = append(ours, t), append(plain, w), append(ratios, t/w)
	}
	b.ReportMetric(median(ours), "ms-first-byte")
	b.ReportMetric(median(plain), "ms-first-byte-bwrap")
	b.ReportMetric(100*(median(ratios)-1), "%-overhead")
}
