//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// benchBusyDefault keeps `-benchtime=1x` quick; the figure is 500
// (TERMGATE_BENCH_BUSY=500).
const benchBusyDefault = 16

// benchBusy is how many busy executions tenant A runs.
func benchBusy(b *testing.B) int {
	s := os.Getenv("TERMGATE_BENCH_BUSY")
	if s == "" {
		return benchBusyDefault
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 2000 {
		b.Fatalf("TERMGATE_BENCH_BUSY=%q: want 0..2000", s)
	}
	return n
}

// BenchmarkTenantEcho measures the keystroke echo of tenant B's terminal
// (a byte written to the PTY master, read back from cat in raw mode)
// while tenant A runs N busy executions (`while :; do :; done`), each
// with its own CPU weight of 100. "before" is the layout without tenants,
// every execution directly under termgate/: B's cat is one of N+1 equal
// peers. "after" gives each tenant a cgroup of equal weight (cpu.shares on
// v1, hierarchical): B's group gets half the CPU whatever A runs.
//
//	TERMGATE_BENCH_BUSY=500 go test ./sandbox -run '^$' -bench TenantEcho -benchtime=1x
func BenchmarkTenantEcho(b *testing.B) {
	n := benchBusy(b)
	for _, mode := range []struct {
		name       string
		tenantA, B string
	}{{"before", "", ""}, {"after", "a", "b"}} {
		b.Run(fmt.Sprintf("%s/busy=%d", mode.name, n), func(b *testing.B) {
			l := cgroupTestLauncher(b, Config{TenantLimits: Limits{CPUWeight: 100}})
			cgroupRequire(b, l.cgroups.Info().CPU, "a cpu weight", l.cgroups.Info())
			ws := sandboxtest.Dir(b)
			busy := benchStartBusy(b, l, Policy{Command: sh("echo up; while :; do :; done"), Workspace: ws, Tenant: mode.tenantA, Limits: Limits{CPUWeight: 100}}, n)
			defer benchStopAll(busy)
			echo := &echoOutput{arrived: make(chan struct{}, 1)}
			cat, err := l.Start(context.Background(), Policy{
				Command: sh("stty raw -echo; echo ready; exec cat"), Workspace: ws, Tenant: mode.B,
				TTY: &WindowSize{Rows: 24, Cols: 80}, Limits: Limits{CPUWeight: 100},
			}, Stdio{Stdout: echo})
			if err != nil {
				b.Fatalf("start cat: %v", err)
			}
			defer benchStopAll([]*Process{cat})
			if !echo.waitLen(len("ready\n"), 60*time.Second) {
				b.Fatalf("cat not ready after 60 s: output %q, %s", echo.text(), benchDescribe(cat))
			}
			var rtts []time.Duration
			for b.Loop() {
				rtts = append(rtts, benchKeys(b, cat, echo, 200)...)
			}
			slices.Sort(rtts)
			b.ReportMetric(benchQuantile(rtts, 0.50), "p50-ms")
			b.ReportMetric(benchQuantile(rtts, 0.99), "p99-ms")
		})
	}
}

// benchStartBusy starts n copies of p, 16 at a time, as a server opening
// shells would, and waits until each has printed: Start returns while
// bwrap still sets the sandbox up, and a setup starved of CPU while it
// holds the kernel's mount lock stalls every other start (seen here: a
// start of tenant B waited over 60 s in do_lock_mount while 500 of A's
// were setting up). The benchmark measures the steady state after that.
func benchStartBusy(b *testing.B, l *Launcher, p Policy, n int) []*Process {
	procs := make([]*Process, n)
	errs := make([]error, n)
	ups := make([]*echoOutput, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		ups[i] = &echoOutput{arrived: make(chan struct{}, 1)}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			procs[i], errs[i] = l.Start(context.Background(), p, Stdio{Stdout: ups[i]})
		}()
	}
	wg.Wait()
	var started []*Process
	for i, p := range procs {
		if errs[i] == nil {
			started = append(started, p)
		}
	}
	deadline := time.Now().Add(5 * time.Minute)
	for i, up := range ups {
		if errs[i] == nil && !up.waitLen(len("up\n"), time.Until(deadline)) {
			errs[i] = fmt.Errorf("busy execution %d not up after 5 minutes: %s", i, benchDescribe(procs[i]))
		}
	}
	for _, err := range errs {
		if err != nil {
			benchStopAll(started)
			b.Fatalf("start busy execution: %v", err)
		}
	}
	return started
}

// benchStopAll kills every process and waits until each is reaped.
func benchStopAll(procs []*Process) {
	for _, p := range procs {
		p.Kill()
	}
	for _, p := range procs {
		p.Wait()
		p.Release()
	}
}

// benchKeys types keys one at a time, a few milliseconds apart as typing
// is, and returns each round trip from the write to the echo's arrival.
func benchKeys(b *testing.B, p *Process, echo *echoOutput, keys int) []time.Duration {
	rtts := make([]time.Duration, 0, keys)
	for range keys {
		time.Sleep(5 * time.Millisecond)
		want := echo.len() + 1
		start := time.Now()
		if _, err := p.Stdin().Write([]byte{'x'}); err != nil {
			b.Fatalf("type: %v", err)
		}
		if !echo.waitLen(want, 30*time.Second) {
			b.Fatalf("no echo within 30 s")
		}
		rtts = append(rtts, time.Since(start))
	}
	return rtts
}

// benchQuantile returns quantile q of sorted durations, in milliseconds.
func benchQuantile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(int(q*float64(len(sorted))), len(sorted)-1)
	return float64(sorted[i].Microseconds()) / 1000
}

// echoOutput collects a terminal's output and signals each arrival.
type echoOutput struct {
	mu      sync.Mutex
	buf     []byte
	arrived chan struct{}
}

func (e *echoOutput) Write(b []byte) (int, error) {
	e.mu.Lock()
	e.buf = append(e.buf, b...)
	e.mu.Unlock()
	select {
	case e.arrived <- struct{}{}:
	default:
	}
	return len(b), nil
}

func (e *echoOutput) len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.buf)
}

func (e *echoOutput) text() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return string(e.buf)
}

// waitLen waits until at least n bytes arrived, for at most d.
func (e *echoOutput) waitLen(n int, d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for e.len() < n {
		select {
		case <-e.arrived:
		case <-deadline.C:
			return false
		}
	}
	return true
}

// benchDescribe tells where a process that did not answer is: its exit,
// or the state and kernel wait channel of each process in its cgroup.
func benchDescribe(p *Process) string {
	if exit, ok := waitDone(p, 0); ok {
		return "exited: " + exit.String()
	}
	var out []string
	for _, pid := range p.cg.Pids() {
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
		out = append(out, fmt.Sprintf("%s wchan=%s", strings.TrimSpace(string(stat)), wchan))
	}
	return "running: " + strings.Join(out, "; ")
}
