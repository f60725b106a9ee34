//go:build linux

package sandbox

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// procTestTimeout bounds every wait on the kernel in these tests.
const procTestTimeout = 10 * time.Second

// procSkipOrFail skips locally but fails in CI: a silently skipped sandbox
// test is worse than a red one.
func procSkipOrFail(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(reason)
	}
	t.Skip(reason)
}

// newTestProcWatcher returns a watcher on the real kernel, closed at cleanup.
func newTestProcWatcher(t testing.TB) *procWatcher {
	t.Helper()
	if os.Geteuid() != 0 {
		procSkipOrFail(t, "process events need root (CAP_NET_ADMIN in the initial namespaces)")
	}
	w, err := newProcWatcher(slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		procSkipOrFail(t, fmt.Sprintf("process event connector unavailable: %v", err))
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// waitProcDone waits, bounded, for the track to finish.
func waitProcDone(t *testing.T, tr *procTrack) {
	t.Helper()
	select {
	case <-tr.done():
	case <-time.After(procTestTimeout):
		t.Fatalf("track of pid %d not done after %v", tr.outer, procTestTimeout)
	}
}

// runProcTree starts script under sh blocked on stdin, tracks it, then lets
// it run: track must precede any fork, as the launcher guarantees for bwrap.
func runProcTree(t *testing.T, w *procWatcher, script string, env ...string) *procTrack {
	t.Helper()
	cmd := exec.Command("sh", "-c", "read -r x; "+script)
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sh: %v", err)
	}
	tr := w.track(cmd.Process.Pid)
	t.Cleanup(func() { w.untrack(tr) })
	io.WriteString(stdin, "go\n")
	stdin.Close()
	waitProcDone(t, tr)
	cmd.Wait()
	return tr
}

func TestProcWatcherSelfTest(t *testing.T) {
	t.Parallel()
	w := newTestProcWatcher(t)
	if err := w.selfTest(t.Context()); err != nil {
		t.Fatalf("selfTest: %v", err)
	}
}

// TestProcWatcherTree mimics bwrap's tree: outer forks init, init forks the
// workload, which execs sh and then exits or kills itself. The trailing
// "exit 0" keeps sh from exec'ing its last command in place of forking.
func TestProcWatcherTree(t *testing.T) {
	t.Parallel()
	w := newTestProcWatcher(t)
	tests := []struct {
		name     string
		workload string
		check    func(unix.WaitStatus) bool
	}{
		{"killed by SIGTERM", "kill -TERM $$", func(st unix.WaitStatus) bool {
			return st.Signaled() && st.Signal() == unix.SIGTERM
		}},
		{"exit 3", "exit 3", func(st unix.WaitStatus) bool {
			return st.Exited() && st.ExitStatus() == 3
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := runProcTree(t, w, `sh -c "$TG_INIT"; exit 0`,
				`TG_INIT=sh -c "$TG_WORKLOAD"; exit 0`, "TG_WORKLOAD="+tc.workload)
			// After the tree exited, the pids are reported but no longer
			// valid (ok is false): they may have been reused.
			initPid, ok := tr.initPid()
			if ok || initPid == 0 || initPid == tr.outer {
				t.Errorf("initPid() = %d, %v; want a pid other than outer %d, no longer valid", initPid, ok, tr.outer)
			}
			workload, ok := tr.workloadPid()
			if ok || workload == 0 || workload == initPid || workload == tr.outer {
				t.Errorf("workloadPid() = %d, %v; want a third pid (outer %d, init %d), no longer valid", workload, ok, tr.outer, initPid)
			}
			if !tr.execed() {
				t.Error("execed() = false, want true")
			}
			if st, ok := tr.workloadExit(); !ok || !tc.check(st) {
				t.Errorf("workloadExit() = %#x, %v", uint32(st), ok)
			}
			if !tr.complete() {
				t.Error("complete() = false, want true")
			}
		})
	}
}

// TestProcWatcherNoFork is a bwrap setup failure: outer exits 1 before
// forking anything.
func TestProcWatcherNoFork(t *testing.T) {
	t.Parallel()
	w := newTestProcWatcher(t)
	tr := runProcTree(t, w, "exit 1")
	if pid, ok := tr.initPid(); ok {
		t.Errorf("initPid() = %d, want none", pid)
	}
	if pid, ok := tr.workloadPid(); ok {
		t.Errorf("workloadPid() = %d, want none", pid)
	}
	if tr.execed() {
		t.Error("execed() = true, want false")
	}
	if _, ok := tr.workloadExit(); ok {
		t.Error("workloadExit() reported a status, want none")
	}
	if !tr.complete() {
		t.Error("complete() = false, want true")
	}
	if st := tr.outerExit(); !st.Exited() || st.ExitStatus() != 1 {
		t.Errorf("outerExit() = %#x, want exit 1", uint32(st))
	}
}

// TestProcWatcherClose is not parallel: goleak compares against the
// goroutines present at its start, and parallel tests would add theirs.
func TestProcWatcherClose(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	w := newTestProcWatcher(t)
	open := w.track(os.Getpid()) // never exits: only Close can finish it
	closed := make(chan error, 1)
	go func() { closed <- w.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(procTestTimeout):
		t.Fatal("Close did not return: the reader was not unblocked")
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	waitProcDone(t, open)
	if open.complete() {
		t.Error("complete() = true for a track ended by Close")
	}
	if late := w.track(os.Getpid()); !isProcDone(late) || late.complete() {
		t.Error("track after Close must start done and incomplete")
	}
	goleak.VerifyNone(t, ignore)
}

func isProcDone(tr *procTrack) bool {
	select {
	case <-tr.done():
		return true
	default:
		return false
	}
}

func procFork(parent, child uint32) procEvent {
	return procEvent{what: procEventFork, pid: parent, tgid: parent, childPid: child, childTgid: child}
}

func procThread(parent, tid uint32) procEvent {
	return procEvent{what: procEventFork, pid: parent, tgid: parent, childPid: tid, childTgid: parent}
}

func procExec(pid uint32) procEvent {
	return procEvent{what: procEventExec, pid: pid, tgid: pid}
}

func procExit(pid uint32, st unix.WaitStatus) procEvent {
	return procEvent{what: procEventExit, pid: pid, tgid: pid, exitCode: uint32(st)}
}

// TestProcWatcherEvents drives the bookkeeping with synthetic events for a
// track of pid 100; it needs no privileges.
func TestProcWatcherEvents(t *testing.T) {
	t.Parallel()
	const sigterm = unix.WaitStatus(unix.SIGTERM)
	tests := []struct {
		name     string
		events   []procEvent
		init     int
		workload int
		execed   bool
		status   unix.WaitStatus
		exited   bool
		done     bool
	}{
		{
			name:   "whole tree",
			events: []procEvent{procFork(100, 101), procFork(101, 102), procExec(102), procExit(102, sigterm), procExit(101, 143<<8), procExit(100, 143<<8)},
			init:   101, workload: 102, execed: true, status: sigterm, exited: true, done: true,
		},
		{
			name:   "outer's exit overtakes the workload's",
			events: []procEvent{procFork(100, 101), procFork(101, 102), procExec(102), procExit(101, 0), procExit(100, 0)},
			init:   101, workload: 102, execed: true,
		},
		{
			name:   "setup failure",
			events: []procEvent{procExit(100, 1<<8)},
			done:   true,
		},
		{
			name:   "threads are not processes",
			events: []procEvent{procThread(100, 150), procFork(100, 101), procThread(101, 151), procEvent{what: procEventExit, pid: 150, tgid: 100}, procEvent{what: procEventExit, pid: 151, tgid: 101}},
			init:   101,
		},
		{
			name: "later forks and other trees are ignored",
			events: []procEvent{procFork(100, 101), procFork(100, 105), procFork(101, 102), procFork(101, 106),
				procFork(102, 103), procExit(103, 0), procFork(7, 8), procExec(8), procExit(8, 0), procExec(101)},
			init: 101, workload: 102,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newProcState(nil)
			tr := w.track(100)
			for _, ev := range tc.events {
				w.handle(ev)
			}
			if got, _ := tr.initPid(); got != tc.init {
				t.Errorf("initPid() = %d, want %d", got, tc.init)
			}
			if got, _ := tr.workloadPid(); got != tc.workload {
				t.Errorf("workloadPid() = %d, want %d", got, tc.workload)
			}
			if got := tr.execed(); got != tc.execed {
				t.Errorf("execed() = %v, want %v", got, tc.execed)
			}
			if st, ok := tr.workloadExit(); st != tc.status || ok != tc.exited {
				t.Errorf("workloadExit() = %#x, %v; want %#x, %v", uint32(st), ok, uint32(tc.status), tc.exited)
			}
			if got := isProcDone(tr); got != tc.done || tr.complete() != tc.done {
				t.Errorf("done = %v, complete() = %v; want %v", got, tr.complete(), tc.done)
			}
		})
	}
}

func TestProcWatcherLateWorkloadExit(t *testing.T) {
	t.Parallel()
	w := newProcState(nil)
	tr := w.track(100)
	for _, ev := range []procEvent{procFork(100, 101), procFork(101, 102), procExit(100, 0), procExit(101, 0)} {
		w.handle(ev)
	}
	if isProcDone(tr) {
		t.Fatal("done before the workload's exit event")
	}
	w.handle(procExit(102, 3<<8))
	if !isProcDone(tr) || !tr.complete() {
		t.Fatal("not complete after the workload's exit event")
	}
	if st, ok := tr.workloadExit(); !ok || st.ExitStatus() != 3 {
		t.Errorf("workloadExit() = %#x, %v; want exit 3", uint32(st), ok)
	}
}

func TestProcWatcherOverflow(t *testing.T) {
	t.Parallel()
	w := newProcState(nil)
	before := w.track(100)
	w.handle(procFork(100, 101))
	w.overflowed(unix.ENOBUFS)
	if !isProcDone(before) || before.complete() {
		t.Error("a track open during an overflow must be done and incomplete")
	}
	after := w.track(200)
	w.handle(procExit(200, 0))
	if !after.complete() {
		t.Error("a track started after the overflow must not be marked lost")
	}
}

// TestProcWatcherPidReuse checks that untrack leaves alone a pid that a
// newer track now owns.
func TestProcWatcherPidReuse(t *testing.T) {
	t.Parallel()
	w := newProcState(nil)
	old := w.track(100)
	for _, ev := range []procEvent{procFork(100, 101), procFork(101, 102), procExit(102, 0)} {
		w.handle(ev)
	}
	reused := w.track(102)
	w.untrack(old)
	if !isProcDone(old) || old.complete() {
		t.Error("untrack must finish an open track as incomplete")
	}
	w.handle(procExit(102, 0))
	if !reused.complete() {
		t.Error("the newer track of pid 102 lost its entry to untrack")
	}
}

// encodeProcMsg builds one connector netlink message as the kernel sends it.
func encodeProcMsg(ev procEvent) []byte {
	ne := binary.NativeEndian
	const data = procEventHead + 24
	b := make([]byte, procNlmsgHdrLen+procCnMsgLen+data)
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], unix.NLMSG_DONE)
	c := b[procNlmsgHdrLen:]
	ne.PutUint32(c[0:], cnIdxProc)
	ne.PutUint32(c[4:], cnValProc)
	ne.PutUint16(c[16:], data)
	p := c[procCnMsgLen:]
	ne.PutUint32(p[0:], ev.what)
	u := p[procEventHead:]
	ne.PutUint32(u[0:], ev.pid)
	ne.PutUint32(u[4:], ev.tgid)
	switch ev.what {
	case procEventFork:
		ne.PutUint32(u[8:], ev.childPid)
		ne.PutUint32(u[12:], ev.childTgid)
	case procEventExit:
		ne.PutUint32(u[8:], ev.exitCode)
	}
	return b
}

func TestProcEventsDecode(t *testing.T) {
	t.Parallel()
	want := []procEvent{procFork(1, 2), procExec(2), procExit(2, 15)}
	var datagram []byte
	for _, ev := range want {
		datagram = append(datagram, encodeProcMsg(ev)...)
	}
	foreign := encodeProcMsg(procExec(9))
	binary.NativeEndian.PutUint32(foreign[procNlmsgHdrLen:], cnIdxProc+1)
	datagram = append(datagram, foreign...)
	var got []procEvent
	for ev := range procEvents(datagram) {
		got = append(got, ev)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("decoded %v, want %v", got, want)
	}
	for n := range len(datagram) - 1 {
		for range procEvents(datagram[:n]) {
		}
	}
}

func FuzzProcEvents(f *testing.F) {
	f.Add(encodeProcMsg(procFork(1, 2)))
	f.Add(append(encodeProcMsg(procExec(2)), encodeProcMsg(procExit(2, 15))...))
	f.Fuzz(func(t *testing.T, b []byte) {
		w := newProcState(nil)
		w.track(2)
		for ev := range procEvents(b) {
			w.handle(ev)
		}
	})
}

// BenchmarkProcWatcherDatagram measures the reader's cost per event after
// the receive: decoding and the lookup, with 100 sandboxes tracked.
func BenchmarkProcWatcherDatagram(b *testing.B) {
	w := newProcState(nil)
	for pid := range 100 {
		w.track(10_000 + pid)
	}
	for _, bc := range []struct {
		name string
		ev   procEvent
	}{
		{"untracked exit", procExit(5, 0)},
		{"untracked fork", procFork(5, 6)},
		{"tracked exec", procExec(10_000)},
	} {
		msg := encodeProcMsg(bc.ev)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				w.handleDatagram(msg)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkProcWatcherForkStorm reports the CPU this process spends, mostly
// in the reader, while a shell runs 2,000 /bin/true. Run it with
// -benchtime=1x: each iteration is a whole storm.
func BenchmarkProcWatcherForkStorm(b *testing.B) {
	w := newTestProcWatcher(b)
	storm := `i=0; while [ $i -lt 2000 ]; do /bin/true; i=$((i+1)); done`
	for b.Loop() {
		before := procSelfCPU(b)
		if out, err := exec.Command("sh", "-c", storm).CombinedOutput(); err != nil {
			b.Fatalf("storm: %v: %s", err, out)
		}
		// The storm's last exit event must be read before measuring.
		if err := w.selfTest(b.Context()); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(procSelfCPU(b)-before)/float64(time.Millisecond), "cpu-ms/storm")
	}
}

func procSelfCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
