//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/termgate/termgate/gateway/wire"
)

// table is one run's figures.
type table struct {
	p50, p99          time.Duration // keystroke echo
	cpuPerKey         time.Duration // server process
	ctxPerKey         float64
	openAll           time.Duration
	cpuPerShell       time.Duration // whole tree
	cpuByGroups       bool          // cpuPerShell counts the executions' cgroups, not only the process tree
	serverPerShell    time.Duration // the server process's own, over the opening
	keeperPerShell    time.Duration // the keeper's own, over the opening; 0 without one
	rssPerSession     float64       // kB, server, attached idle
	rssParts          [3]float64    // kB: rssPerSession's anonymous, shared memory and file parts
	procsPerShell     float64
	pssPerShell       float64 // kB, whole tree
	rssAfterClose     int64   // kB, server, all shells gone
	rssSettled        int64   // kB, server, -settle later
	rssBefore, rssMax int64   // kB, server
	floors            floors  // the echo's floors, when floorsOn
	floorsOn          bool
	machinePerShell   time.Duration // the machine's CPU over the opening, per shell
	clientPerShell    time.Duration // of it, this process's own: the clients that open the shells
	shellFloor        shellFloor    // the shells' floor, when floorsOn
	out               outputTable   // PTY output and its floors, without -output-mib 0
	nShells, par      int
}

// measure runs the echo, then the shells, on srv.
func measure(ctx context.Context, srv *server, o options) (table, error) {
	var t table
	if err := t.echo(ctx, srv, o); err != nil {
		return t, fmt.Errorf("echo: %w", err)
	}
	if err := t.shells(ctx, srv, o); err != nil {
		return t, fmt.Errorf("shells: %w", err)
	}
	if o.outputMiB > 0 {
		if err := t.output(ctx, srv, o); err != nil {
			return t, fmt.Errorf("output: %w", err)
		}
	}
	return t, nil
}

// echo types o.warm and then o.keys bytes into cat on a raw PTY, each
// after the echo of the one before, and times the second lot.
func (t *table) echo(ctx context.Context, srv *server, o options) error {
	s, err := dial(ctx, srv, "echo", "/bin/sh", "-c", "stty raw -echo; echo READY; exec cat")
	if err != nil {
		return err
	}
	defer s.close()
	if err := waitFor(ctx, s, []byte("READY")); err != nil {
		return err
	}
	var cpu0 time.Duration
	var ctx0 int64
	profiled := make(<-chan error)
	timed := func() {
		cpu0, ctx0 = ownCPU(srv.pid), ctxSwitches(srv.pid)
		profiled = startProfile(ctx, srv, o, phaseEcho)
	}
	p, err := roundTrips(o, timed, func(k []byte) error {
		if err := s.input(ctx, k); err != nil {
			return err
		}
		return waitFor(ctx, s, k)
	})
	if err != nil {
		return err
	}
	t.cpuPerKey = (ownCPU(srv.pid) - cpu0) / time.Duration(o.keys)
	t.ctxPerKey = float64(ctxSwitches(srv.pid)-ctx0) / float64(o.keys)
	t.p50, t.p99 = p[0], p[1]
	if err := <-profiled; err != nil {
		return err
	}
	return s.send(ctx, wire.Request{Type: wire.TypeCancel, ID: "echo"})
}

// waitFor reads s's output until want arrived.
func waitFor(ctx context.Context, s *session, want []byte) error {
	var seen []byte
	for {
		out, err := s.output(ctx)
		if err != nil {
			return err
		}
		seen = append(seen, out...)
		if bytes.Contains(seen, want) {
			return nil
		}
		seen = seen[max(0, len(seen)-len(want)):]
	}
}

// idleSettle is how long the shells are left idle before serve's memory
// is sampled: the last prompts' output is read and acknowledged, and
// serve's output copiers, which give their goroutines up after 5 s
// without output, have, as a session idle for minutes has.
const idleSettle = 6 * time.Second

// shells opens o.shells bash shells, o.par at a time, samples memory
// with all of them attached and idle, then ends them and waits, at most
// a minute, until their processes are gone.
func (t *table) shells(ctx context.Context, srv *server, o options) error {
	base := sampleMemory(srv.pid)
	keeper := keeperPID(srv.pid)
	cpu0, _ := shellsCPU(srv.pid, keeper, srv.cgParent)
	own0, keeper0 := ownCPU(srv.pid), ownCPU(keeper)
	profiled := startProfile(ctx, srv, o, phaseShells)
	client0 := ownCPU(os.Getpid())
	busy0, start := machineBusy(), time.Now()
	sessions, err := openShells(ctx, srv, o.shells, o.par)
	t.openAll = time.Since(start)
	t.machinePerShell = (machineBusy() - busy0) / time.Duration(o.shells)
	t.clientPerShell = (ownCPU(os.Getpid()) - client0) / time.Duration(o.shells)
	t.nShells, t.par = o.shells, o.par
	t.serverPerShell = (ownCPU(srv.pid) - own0) / time.Duration(o.shells)
	t.keeperPerShell = (ownCPU(keeper) - keeper0) / time.Duration(o.shells)
	defer func() {
		for _, s := range sessions {
			s.close()
		}
	}()
	err = errors.Join(err, <-profiled)
	if err != nil {
		return err
	}
	time.Sleep(idleSettle)
	loaded := sampleMemory(srv.pid)
	n := float64(o.shells)
	t.rssBefore, t.rssMax = base.serverRSS, loaded.serverRSS
	t.rssPerSession = float64(loaded.serverRSS-base.serverRSS) / n
	t.rssParts = [3]float64{float64(loaded.anon-base.anon) / n, float64(loaded.shmem-base.shmem) / n, float64(loaded.file-base.file) / n}
	t.procsPerShell = float64(loaded.processes-base.processes) / n
	t.pssPerShell = float64(loaded.treePSS-base.treePSS) / n
	if err := writeHeapProfile(ctx, srv, o); err != nil {
		return err
	}
	if err := endShells(ctx, sessions); err != nil {
		return err
	}
	if err := waitProcesses(ctx, srv.pid, base.processes, time.Minute); err != nil {
		return err
	}
	cpu1, byGroups := shellsCPU(srv.pid, keeper, srv.cgParent)
	t.cpuPerShell, t.cpuByGroups = (cpu1-cpu0)/time.Duration(o.shells), byGroups
	t.rssAfterClose = statusKB(srv.pid, "VmRSS:")
	select { // the server may return freed memory to the OS lazily
	case <-time.After(o.settle):
	case <-ctx.Done():
		return ctx.Err()
	}
	t.rssSettled = statusKB(srv.pid, "VmRSS:")
	return writeSettledHeapProfile(ctx, srv, o)
}

// openShells opens n shells, par at a time; a shell is open when its
// prompt arrived. A reader per shell then drains its output.
func openShells(ctx context.Context, srv *server, n, par int) ([]*session, error) {
	sessions := make([]*session, n)
	errs := make([]error, n)
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sessions[i], errs[i] = openShell(ctx, srv, fmt.Sprint("shell-", i))
		}()
	}
	wg.Wait()
	opened := slices.DeleteFunc(sessions, func(s *session) bool { return s == nil })
	return opened, errors.Join(errs...)
}

func openShell(ctx context.Context, srv *server, id string) (*session, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := dial(ctx, srv, id, "/bin/bash", "--noprofile", "--norc")
	if err != nil {
		return nil, err
	}
	if _, err := s.output(ctx); err != nil { // the prompt
		s.close()
		return nil, fmt.Errorf("%s: %w", id, err)
	}
	go drain(s) // ends when the connection is closed
	return s, nil
}

// drain reads s until its connection ends, so pings are answered.
func drain(s *session) {
	for {
		if _, _, err := s.read(context.Background()); err != nil {
			return
		}
	}
}

// endShells sends every shell's cancel and closes its connection.
func endShells(ctx context.Context, sessions []*session) error {
	var errs []error
	for i, s := range sessions {
		errs = append(errs, s.send(ctx, wire.Request{Type: wire.TypeCancel, ID: fmt.Sprint("shell-", i)}))
	}
	for _, s := range sessions {
		s.ws.Close(1000, "")
	}
	return errors.Join(errs...)
}

// waitProcesses waits until at most want processes are below pid.
func waitProcesses(ctx context.Context, pid, want int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		n := len(descendants(pid))
		if n <= want {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%d processes left below the server after %v, want %d", n, limit, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// print writes the table in issue 17's rows.
func (t table) print(w io.Writer, o options) {
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	fmt.Fprintf(w, "| figure (termgate-load -keys %d -shells %d -par %d) | termgate |\n|---|---|\n", o.keys, o.shells, o.par)
	fmt.Fprintf(w, "| keystroke echo p50 / p99, us | %.0f / %.0f |\n", us(t.p50), us(t.p99))
	if t.floorsOn {
		fmt.Fprintf(w, "| floor: bare PTY echo p50 / p99 (cat, raw), us | %.0f / %.0f |\n", us(t.floors.pty[0]), us(t.floors.pty[1]))
		fmt.Fprintf(w, "| floor: bare WebSocket echo p50 / p99, server in another process, us | %.0f / %.0f |\n", us(t.floors.ws[0]), us(t.floors.ws[1]))
		fmt.Fprintf(w, "| keystroke echo p50 above the floors' sum, us | %.0f |\n", us(t.p50-t.floors.pty[0]-t.floors.ws[0]))
		fmt.Fprintf(w, "| floor: bare relay echo p50 / p99 (a WebSocket to cat's PTY, no sandbox or protocol), server in another process, us | %.0f / %.0f |\n", us(t.floors.relay[0]), us(t.floors.relay[1]))
		fmt.Fprintf(w, "| keystroke echo p50 above the bare relay, us | %.0f |\n", us(t.p50-t.floors.relay[0]))
	}
	fmt.Fprintf(w, "| server CPU and context switches per keystroke | %.0f us, %.1f |\n", us(t.cpuPerKey), t.ctxPerKey)
	fmt.Fprintf(w, "| open %d shells, %d at a time | %.2f s |\n", o.shells, o.par, t.openAll.Seconds())
	if t.floorsOn {
		for _, row := range t.shellFloorRows() {
			fmt.Fprintln(w, row)
		}
	}
	how := "serve, keeper and the executions' cgroups"
	if !t.cpuByGroups {
		how = "/proc, without cgroup2: misses processes reparented out of the tree"
	}
	fmt.Fprintf(w, "| CPU per shell, whole process tree (%s) | %.1f ms |\n", how, us(t.cpuPerShell)/1000)
	fmt.Fprintf(w, "| CPU per shell opened, server process / keeper process | %.2f / %.2f ms |\n",
		us(t.serverPerShell)/1000, us(t.keeperPerShell)/1000)
	fmt.Fprintf(w, "| server RSS per attached idle session | %.0f kB |\n", t.rssPerSession)
	fmt.Fprintf(w, "| of it anonymous (Go heap, stacks, runtime) / shared memory (mapped rings, input logs) / file | %.1f / %.1f / %.1f kB |\n",
		tenths(t.rssParts[0]), tenths(t.rssParts[1]), tenths(t.rssParts[2]))
	fmt.Fprintf(w, "| processes per shell / tree PSS per shell | %.0f / %.0f kB |\n", t.procsPerShell, t.pssPerShell)
	fmt.Fprintf(w, "| server RSS before / all open / all closed / %s later | %d / %d / %d / %d kB |\n",
		o.settle, t.rssBefore, t.rssMax, t.rssAfterClose, t.rssSettled)
	for _, row := range t.outputRows() {
		fmt.Fprintln(w, row)
	}
}

// tenths rounds kB to a tenth, a part that shrank by less than that
// printing as 0.0 rather than -0.0.
func tenths(kb float64) float64 {
	if r := math.Round(kb*10) / 10; r != 0 {
		return r
	}
	return 0
}
