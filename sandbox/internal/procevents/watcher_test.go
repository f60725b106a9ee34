//go:build linux

package procevents

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// testTimeout bounds every wait on the kernel in these tests.
const testTimeout = 10 * time.Second

// newTestWatcher returns a watcher on the real kernel, closed at cleanup.
func newTestWatcher(t testing.TB) *Watcher {
	t.Helper()
	if os.Geteuid() != 0 {
		sandboxtest.Unavailable(t, "%s", "process events need root (CAP_NET_ADMIN in the initial namespaces)")
	}
	w, err := New(slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		sandboxtest.Unavailable(t, "%s", fmt.Sprintf("process event connector unavailable: %v", err))
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// waitDone waits, bounded, for the track to finish.
func waitDone(t *testing.T, tr *Track) {
	t.Helper()
	select {
	case <-tr.Done():
	case <-time.After(testTimeout):
		t.Fatalf("track of pid %d not done after %v", tr.outer, testTimeout)
	}
}

// runTree starts script under sh blocked on stdin, tracks it, then lets
// it run: track must precede any fork, as the launcher guarantees for bwrap.
func runTree(t *testing.T, w *Watcher, script string, env ...string) *Track {
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
	tr := w.Track(cmd.Process.Pid)
	t.Cleanup(func() { w.Untrack(tr) })
	io.WriteString(stdin, "go\n")
	stdin.Close()
	waitDone(t, tr)
	cmd.Wait()
	return tr
}

func TestSelfTest(t *testing.T) {
	t.Parallel()
	w := newTestWatcher(t)
	if err := w.SelfTest(t.Context()); err != nil {
		t.Fatalf("selfTest: %v", err)
	}
}

// TestTree mimics bwrap's tree: outer forks init, init forks the
// workload, which execs sh and then exits or kills itself. The trailing
// "exit 0" keeps sh from exec'ing its last command in place of forking.
func TestTree(t *testing.T) {
	t.Parallel()
	w := newTestWatcher(t)
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
			tr := runTree(t, w, `sh -c "$TG_INIT"; exit 0`,
				`TG_INIT=sh -c "$TG_WORKLOAD"; exit 0`, "TG_WORKLOAD="+tc.workload)
			// After the tree exited, the pids are reported but no longer
			// valid (ok is false): they may have been reused.
			initPid, ok := tr.InitPid()
			if ok || initPid == 0 || initPid == tr.outer {
				t.Errorf("InitPid() = %d, %v; want a pid other than outer %d, no longer valid", initPid, ok, tr.outer)
			}
			workload, ok := tr.WorkloadPid()
			if ok || workload == 0 || workload == initPid || workload == tr.outer {
				t.Errorf("WorkloadPid() = %d, %v; want a third pid (outer %d, init %d), no longer valid", workload, ok, tr.outer, initPid)
			}
			if !tr.Execed() {
				t.Error("Execed() = false, want true")
			}
			if st, ok := tr.WorkloadExit(); !ok || !tc.check(st) {
				t.Errorf("WorkloadExit() = %#x, %v", uint32(st), ok)
			}
			if !tr.Complete() {
				t.Error("Complete() = false, want true")
			}
		})
	}
}

// TestNoFork is a bwrap setup failure: outer exits 1 before
// forking anything.
func TestNoFork(t *testing.T) {
	t.Parallel()
	w := newTestWatcher(t)
	tr := runTree(t, w, "exit 1")
	if pid, ok := tr.InitPid(); ok {
		t.Errorf("InitPid() = %d, want none", pid)
	}
	if pid, ok := tr.WorkloadPid(); ok {
		t.Errorf("WorkloadPid() = %d, want none", pid)
	}
	if tr.Execed() {
		t.Error("Execed() = true, want false")
	}
	if _, ok := tr.WorkloadExit(); ok {
		t.Error("WorkloadExit() reported a status, want none")
	}
	if !tr.Complete() {
		t.Error("Complete() = false, want true")
	}
	if st := tr.OuterExit(); !st.Exited() || st.ExitStatus() != 1 {
		t.Errorf("OuterExit() = %#x, want exit 1", uint32(st))
	}
}

// TestClose is not parallel: goleak compares against the
// goroutines present at its start, and parallel tests would add theirs.
func TestClose(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	w := newTestWatcher(t)
	open := w.Track(os.Getpid()) // never exits: only Close can finish it
	closed := make(chan error, 1)
	go func() { closed <- w.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Close did not return: the reader was not unblocked")
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	waitDone(t, open)
	if open.Complete() {
		t.Error("Complete() = true for a track ended by Close")
	}
	if late := w.Track(os.Getpid()); !isDone(late) || late.Complete() {
		t.Error("track after Close must start done and incomplete")
	}
	goleak.VerifyNone(t, ignore)
}

func isDone(tr *Track) bool {
	select {
	case <-tr.Done():
		return true
	default:
		return false
	}
}

func fakeFork(parent, child uint32) event {
	return event{what: eventFork, pid: parent, tgid: parent, childPid: child, childTgid: child}
}

func fakeThread(parent, tid uint32) event {
	return event{what: eventFork, pid: parent, tgid: parent, childPid: tid, childTgid: parent}
}

func fakeExec(pid uint32) event {
	return event{what: eventExec, pid: pid, tgid: pid}
}

func fakeExit(pid uint32, st unix.WaitStatus) event {
	return event{what: eventExit, pid: pid, tgid: pid, exitCode: uint32(st)}
}

// TestEvents drives the bookkeeping with synthetic events for a
// track of pid 100; it needs no privileges.
func TestEvents(t *testing.T) {
	t.Parallel()
	const sigterm = unix.WaitStatus(unix.SIGTERM)
	tests := []struct {
		name     string
		events   []event
		init     int
		workload int
		execed   bool
		status   unix.WaitStatus
		exited   bool
		done     bool
	}{
		{
			name:   "whole tree",
			events: []event{fakeFork(100, 101), fakeFork(101, 102), fakeExec(102), fakeExit(102, sigterm), fakeExit(101, 143<<8), fakeExit(100, 143<<8)},
			init:   101, workload: 102, execed: true, status: sigterm, exited: true, done: true,
		},
		{
			name:   "outer's exit overtakes the workload's",
			events: []event{fakeFork(100, 101), fakeFork(101, 102), fakeExec(102), fakeExit(101, 0), fakeExit(100, 0)},
			init:   101, workload: 102, execed: true,
		},
		{
			name:   "setup failure",
			events: []event{fakeExit(100, 1<<8)},
			done:   true,
		},
		{
			name:   "threads are not processes",
			events: []event{fakeThread(100, 150), fakeFork(100, 101), fakeThread(101, 151), event{what: eventExit, pid: 150, tgid: 100}, event{what: eventExit, pid: 151, tgid: 101}},
			init:   101,
		},
		{
			name: "later forks and other trees are ignored",
			events: []event{fakeFork(100, 101), fakeFork(100, 105), fakeFork(101, 102), fakeFork(101, 106),
				fakeFork(102, 103), fakeExit(103, 0), fakeFork(7, 8), fakeExec(8), fakeExit(8, 0), fakeExec(101)},
			init: 101, workload: 102,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWatcher(nil)
			tr := w.Track(100)
			for _, ev := range tc.events {
				w.handle(ev)
			}
			if got, _ := tr.InitPid(); got != tc.init {
				t.Errorf("InitPid() = %d, want %d", got, tc.init)
			}
			if got, _ := tr.WorkloadPid(); got != tc.workload {
				t.Errorf("WorkloadPid() = %d, want %d", got, tc.workload)
			}
			if got := tr.Execed(); got != tc.execed {
				t.Errorf("Execed() = %v, want %v", got, tc.execed)
			}
			if st, ok := tr.WorkloadExit(); st != tc.status || ok != tc.exited {
				t.Errorf("WorkloadExit() = %#x, %v; want %#x, %v", uint32(st), ok, uint32(tc.status), tc.exited)
			}
			if got := isDone(tr); got != tc.done || tr.Complete() != tc.done {
				t.Errorf("done = %v, Complete() = %v; want %v", got, tr.Complete(), tc.done)
			}
		})
	}
}

func TestLateWorkloadExit(t *testing.T) {
	t.Parallel()
	w := newWatcher(nil)
	tr := w.Track(100)
	for _, ev := range []event{fakeFork(100, 101), fakeFork(101, 102), fakeExit(100, 0), fakeExit(101, 0)} {
		w.handle(ev)
	}
	if isDone(tr) {
		t.Fatal("done before the workload's exit event")
	}
	w.handle(fakeExit(102, 3<<8))
	if !isDone(tr) || !tr.Complete() {
		t.Fatal("not complete after the workload's exit event")
	}
	if st, ok := tr.WorkloadExit(); !ok || st.ExitStatus() != 3 {
		t.Errorf("WorkloadExit() = %#x, %v; want exit 3", uint32(st), ok)
	}
}

func TestOverflow(t *testing.T) {
	t.Parallel()
	w := newWatcher(nil)
	before := w.Track(100)
	w.handle(fakeFork(100, 101))
	w.overflowed(unix.ENOBUFS)
	if !isDone(before) || before.Complete() {
		t.Error("a track open during an overflow must be done and incomplete")
	}
	after := w.Track(200)
	w.handle(fakeExit(200, 0))
	if !after.Complete() {
		t.Error("a track started after the overflow must not be marked lost")
	}
}

// TestPidReuse checks that untrack leaves alone a pid that a
// newer track now owns.
func TestPidReuse(t *testing.T) {
	t.Parallel()
	w := newWatcher(nil)
	old := w.Track(100)
	for _, ev := range []event{fakeFork(100, 101), fakeFork(101, 102), fakeExit(102, 0)} {
		w.handle(ev)
	}
	reused := w.Track(102)
	w.Untrack(old)
	if !isDone(old) || old.Complete() {
		t.Error("untrack must finish an open track as incomplete")
	}
	w.handle(fakeExit(102, 0))
	if !reused.Complete() {
		t.Error("the newer track of pid 102 lost its entry to untrack")
	}
}

// encodeMsg builds one connector netlink message as the kernel sends it.
func encodeMsg(ev event) []byte {
	ne := binary.NativeEndian
	const data = eventHead + 24
	b := make([]byte, nlmsgHdrLen+cnMsgLen+data)
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], unix.NLMSG_DONE)
	c := b[nlmsgHdrLen:]
	ne.PutUint32(c[0:], cnIdxProc)
	ne.PutUint32(c[4:], cnValProc)
	ne.PutUint16(c[16:], data)
	p := c[cnMsgLen:]
	ne.PutUint32(p[0:], ev.what)
	u := p[eventHead:]
	ne.PutUint32(u[0:], ev.pid)
	ne.PutUint32(u[4:], ev.tgid)
	switch ev.what {
	case eventFork:
		ne.PutUint32(u[8:], ev.childPid)
		ne.PutUint32(u[12:], ev.childTgid)
	case eventExit:
		ne.PutUint32(u[8:], ev.exitCode)
	}
	return b
}

func TestEventsDecode(t *testing.T) {
	t.Parallel()
	want := []event{fakeFork(1, 2), fakeExec(2), fakeExit(2, 15)}
	var datagram []byte
	for _, ev := range want {
		datagram = append(datagram, encodeMsg(ev)...)
	}
	foreign := encodeMsg(fakeExec(9))
	binary.NativeEndian.PutUint32(foreign[nlmsgHdrLen:], cnIdxProc+1)
	datagram = append(datagram, foreign...)
	var got []event
	for ev := range parseEvents(datagram) {
		got = append(got, ev)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("decoded %v, want %v", got, want)
	}
	for n := range len(datagram) - 1 {
		for range parseEvents(datagram[:n]) {
		}
	}
}

func FuzzEvents(f *testing.F) {
	f.Add(encodeMsg(fakeFork(1, 2)))
	f.Add(append(encodeMsg(fakeExec(2)), encodeMsg(fakeExit(2, 15))...))
	f.Fuzz(func(t *testing.T, b []byte) {
		w := newWatcher(nil)
		w.Track(2)
		for ev := range parseEvents(b) {
			w.handle(ev)
		}
	})
}

// BenchmarkDatagram measures the reader's cost per event after
// the receive: decoding and the lookup, with 100 sandboxes tracked.
func BenchmarkDatagram(b *testing.B) {
	w := newWatcher(nil)
	for pid := range 100 {
		w.Track(10_000 + pid)
	}
	for _, bc := range []struct {
		name string
		ev   event
	}{
		{"untracked exit", fakeExit(5, 0)},
		{"untracked fork", fakeFork(5, 6)},
		{"tracked exec", fakeExec(10_000)},
	} {
		msg := encodeMsg(bc.ev)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				w.handleDatagram(msg)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkForkStorm reports the CPU this process spends, mostly
// in the reader, while a shell runs 2,000 /bin/true. Run it with
// -benchtime=1x: each iteration is a whole storm.
func BenchmarkForkStorm(b *testing.B) {
	w := newTestWatcher(b)
	storm := `i=0; while [ $i -lt 2000 ]; do /bin/true; i=$((i+1)); done`
	for b.Loop() {
		before := selfCPU(b)
		if out, err := exec.Command("sh", "-c", storm).CombinedOutput(); err != nil {
			b.Fatalf("storm: %v: %s", err, out)
		}
		// The storm's last exit event must be read before measuring.
		if err := w.SelfTest(b.Context()); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(selfCPU(b)-before)/float64(time.Millisecond), "cpu-ms/storm")
	}
}

func selfCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestSkipInitChildren: a setuid bwrap's pid 1 forks the unprivileged
// half of its setup first; that helper's exit is not the workload's.
func TestSkipInitChildren(t *testing.T) {
	t.Parallel()
	w := newWatcher(nil)
	tr := w.Track(100)
	tr.SkipInitChildren(1)
	for _, ev := range []event{fakeFork(100, 101), fakeFork(101, 102), fakeExit(102, 0), fakeFork(101, 103), fakeExec(103)} {
		w.handle(ev)
	}
	if pid, ok := tr.WorkloadPid(); !ok || pid != 103 {
		t.Errorf("WorkloadPid() = %d, %v; want 103, the init's second child", pid, ok)
	}
	if _, ended := tr.WorkloadExit(); ended {
		t.Error("the helper's exit was taken for the workload's")
	}
}
