//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/termgate/termgate/sandbox"
)

// The shells' floor (issue 47): termgate's own plan for a shell run bare
// by bwrap (sandbox.RunBare: the same bwrap arguments and descriptors a
// start gives it, the command run by bwrap itself, none of termgate's
// supervision), as many and as many at a time as the shells. The shell
// is the one serve opens, on a PTY of 24x80, with serve's defaults for
// /proc, terminals and tmpfs; with no terminal to read, bash ends at
// once, as a shell that reached its prompt is open. Its CPU is the
// machine's (/proc/stat): the kernel tears namespaces down on threads of
// its own, which no process's usage counts.

// shellFloor is the floor's wall time and machine CPU per start.
type shellFloor struct {
	all, cpuPer time.Duration
}

// measureShellFloor runs o.shells bare plans, o.par at a time.
func measureShellFloor(ctx context.Context, o options) (shellFloor, error) {
	var f shellFloor
	dir, err := os.MkdirTemp("", "termgate-load-floor-")
	if err != nil {
		return f, err
	}
	defer os.RemoveAll(dir)
	l, err := sandbox.NewLauncher(sandbox.Config{})
	if err != nil {
		return f, err
	}
	defer l.Close()
	p := sandbox.Policy{Command: []string{"/bin/bash", "--noprofile", "--norc"}, Workspace: dir,
		TTY: &sandbox.WindowSize{Rows: 24, Cols: 80}, PTYs: 4, Proc: sandbox.ProcPrivate, TmpSize: 64 << 20}
	if err := l.RunBare(p); err != nil { // one first: the lean mount namespace made
		return f, err
	}
	errs := make([]error, o.shells)
	sem := make(chan struct{}, o.par)
	var wg sync.WaitGroup
	busy0, start := machineBusy(), time.Now()
	for i := range o.shells {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return f, ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = l.RunBare(p)
		})
	}
	wg.Wait()
	f.all = time.Since(start)
	f.cpuPer = (machineBusy() - busy0) / time.Duration(o.shells)
	return f, errors.Join(errs...)
}

// machineBusy is the machine's busy CPU time since boot: every state of
// /proc/stat's first line but idle and iowait, in USER_HZ ticks.
func machineBusy() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	var ticks int64
	for i, f := range strings.Fields(line)[1:] { // user nice system idle iowait irq softirq steal ...
		if i != 3 && i != 4 {
			n, _ := strconv.ParseInt(f, 10, 64)
			ticks += n
		}
	}
	return time.Duration(ticks) * clockTick
}

// shellFloorRows are the table's rows for the floor beside termgate's.
func (t table) shellFloorRows() []string {
	f := t.shellFloor
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	server := t.machinePerShell - t.clientPerShell
	return []string{
		fmt.Sprintf("| floor: %d shells' plans run bare by bwrap, %d at a time (sandbox.RunBare) | %.2f s (termgate %.2fx) |",
			t.nShells, t.par, f.all.Seconds(), t.openAll.Seconds()/f.all.Seconds()),
		fmt.Sprintf("| machine CPU per shell opened, termgate / the floor's per start (/proc/stat) | %.1f / %.1f ms (%.2fx) |",
			ms(t.machinePerShell), ms(f.cpuPer), float64(t.machinePerShell)/float64(f.cpuPer)),
		fmt.Sprintf("| machine CPU per shell opened less the clients' own (this process's), termgate / the floor's per start, its driver included | %.1f / %.1f ms (%.2fx) |",
			ms(server), ms(f.cpuPer), float64(server)/float64(f.cpuPer)),
	}
}
