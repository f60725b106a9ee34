//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestMain is also the WebSocket floor's echo server, which the floors
// start as this very binary. The shells' floor keeps the launcher's
// forking thread, as a server does.
func TestMain(m *testing.M) {
	echoServerRole()
	sandboxtest.Main(m, sandboxtest.Ignore(sandboxtest.Forker))
}

// TestParseRefusesWhatCannotBeMeasured: sizes that give no figure are
// refused before anything starts.
func TestParseRefusesWhatCannotBeMeasured(t *testing.T) {
	for _, args := range [][]string{
		{"-keys", "1"}, {"-shells", "0"}, {"-par", "0"}, {"-warm", "-1"}, {"-timeout", "0s"}, {"-settle", "-1s"}, {"-profile", "idle"}, {"extra"},
		{"-termgate", ""}, {"-output-mib", "-1"}, {"-output-mib", "1025"}, {"-output-rounds", "0"}, {"-output-rounds", "11"},
	} {
		if _, err := parse(append([]string{"-termgate", "/bin/true"}, args...), io.Discard); err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
	if o, err := parse([]string{"-termgate", "/bin/true"}, io.Discard); err != nil || o.keys != 2000 || o.shells != 50 || o.par != 16 {
		t.Fatalf("defaults: %+v %v", o, err)
	}
}

// TestLoadPrintsTheTable runs the whole measurement, small, against a
// termgate built from this checkout, and leaves nothing behind.
func TestLoadPrintsTheTable(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "termgate")
	build := exec.Command("go", "build", "-o", bin, "../termgate")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build termgate: %v\n%s", err, out)
	}
	// A safety net: 5x the slowest run seen under -race with both cores
	// busy (64 s, the build included); the tool's own -timeout below it.
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	var out, errs bytes.Buffer
	profile, heap := filepath.Join(t.TempDir(), "cpu.pprof"), filepath.Join(t.TempDir(), "heap.pprof")
	args := []string{"-termgate", bin, "-keys", "50", "-warm", "5", "-shells", "4", "-par", "2", "-timeout", "5m",
		"-cpuprofile", profile, "-profile-for", "1s", "-heapprofile", heap, "-output-mib", "2", "-output-rounds", "1"}
	if err := run(ctx, args, &out, &errs); err != nil {
		t.Fatalf("run: %v\n%s", err, errs.String())
	}
	for _, row := range []string{"| keystroke echo p50 / p99, us | ", "| floor: bare PTY echo p50 / p99 (cat, raw), us | ",
		"| floor: bare WebSocket echo p50 / p99, server in another process, us | ", "| keystroke echo p50 above the floors' sum, us | ",
		"| floor: bare relay echo p50 / p99 (a WebSocket to cat's PTY, no sandbox or protocol), server in another process, us | ",
		"| keystroke echo p50 above the bare relay, us | ", "| server CPU and context switches per keystroke | ",
		"| open 4 shells, 2 at a time | ", "| CPU per shell, whole process tree (serve, keeper and the executions' cgroups) | ", "| server RSS per attached idle session | ",
		"| of it anonymous (Go heap, stacks, runtime) / shared memory (mapped rings, input logs) / file | ",
		"| processes per shell / tree PSS per shell | ", "| CPU per shell opened, server process / keeper process | ",
		"| floor: 4 shells' plans run bare by bwrap, 2 at a time (sandbox.RunBare) | ",
		"| machine CPU per shell opened, termgate / the floor's per start (/proc/stat) | ",
		"| machine CPU per shell opened less the clients' own (this process's), termgate / the floor's per start, its driver included | ",
		"| PTY output, cat of 2.0 MiB of base64 lines (rounds: 1, medians): termgate, acknowledged | ",
		"| floor: a bare blocking read of the PTY | ",
		"| floor: bare delivery (each read of the PTY a WebSocket message to another process) | "} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("no row %q in\n%s", row, out.String())
		}
	}
	if b, err := os.ReadFile(profile); err != nil || !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Errorf("-cpuprofile wrote no gzipped profile: %v, %d bytes", err, len(b))
	}
	if b, err := os.ReadFile(heap); err != nil || !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Errorf("-heapprofile wrote no gzipped profile: %v, %d bytes", err, len(b))
	}
	if b, err := os.ReadFile(heap + ".goroutines"); err != nil || !bytes.Contains(b, []byte("goroutine profile: total")) {
		t.Errorf("-heapprofile wrote no goroutine profile: %v, %d bytes", err, len(b))
	}
	if b, err := os.ReadFile(heap + ".settled"); err != nil || !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Errorf("-heapprofile wrote no profile of the settled heap: %v, %d bytes", err, len(b))
	}
	left, _ := filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/*/termgate-load-%d", os.Getpid()))
	if len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
	if states, _ := filepath.Glob(filepath.Join(stateParent(), "termgate-load-state-*")); len(states) > 0 {
		t.Errorf("state directories left: %v", states) // another run's would show too: one at a time
	}
	// The keeper ends with the executions once serve shut down for good;
	// a restart (serve's default SIGTERM) would leave it for 10 minutes.
	deadline := time.Now().Add(10 * time.Second)
	for procs := running(bin); len(procs) > 0; procs = running(bin) {
		if time.Now().After(deadline) {
			t.Fatalf("processes of %s left: %v", bin, procs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// running lists the pids whose executable is bin.
func running(bin string) []string {
	var pids []string
	exes, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, exe := range exes {
		if target, err := os.Readlink(exe); err == nil && target == bin {
			pids = append(pids, filepath.Base(filepath.Dir(exe)))
		}
	}
	return pids
}

// TestShellsCPUCountsProcessesLeftOutOfTheTree: a process that outlives
// its parent is reparented out of the process tree, and its CPU with it;
// the cgroup it runs in still counts it, also once the group is removed.
func TestShellsCPUCountsProcessesLeftOutOfTheTree(t *testing.T) {
	sandboxtest.NeedRoot(t)
	root := unifiedRoot()
	if root == "" {
		sandboxtest.Unavailable(t, "needs a cgroup2 tree")
	}
	parent := fmt.Sprintf("termgate-load-test-%d", os.Getpid())
	child := filepath.Join(root, parent, "x")
	if err := os.MkdirAll(child, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Rmdir(child); syscall.Rmdir(filepath.Join(root, parent)) })
	dir, err := os.Open(child)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	tree0 := treeCPU(os.Getpid())
	cg0, _ := groupCPU(parent)
	// The outer shell exits at once; its child burns CPU on its own.
	cmd := exec.Command("sh", "-c", "sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done' & exit 0")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, _ := os.ReadFile(filepath.Join(child, "cgroup.procs")); len(b) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the burning shell did not end within 30 s")
		}
	}
	if err := syscall.Rmdir(child); err != nil {
		t.Fatal(err)
	}
	cg1, ok := groupCPU(parent)
	tree1 := treeCPU(os.Getpid())
	burnt, inTree := cg1-cg0, tree1-tree0
	if !ok || burnt < 50*time.Millisecond {
		t.Fatalf("the parent group counted %v (ok %v), want the burning shell's CPU", burnt, ok)
	}
	if inTree > burnt/2 {
		t.Errorf("the process tree counted %v of the group's %v: this test's burner was not left out of it", inTree, burnt)
	}
}

// TestStatusPartsAddUpToRSS reads the server's RSS and its three parts the
// way the table does, from this process: the kernel's parts add up to it.
func TestStatusPartsAddUpToRSS(t *testing.T) {
	st := statusKBs(os.Getpid(), "VmRSS:", "RssAnon:", "RssShmem:", "RssFile:", "NoSuchField:")
	if st[0] <= 0 || st[1] <= 0 || st[3] <= 0 {
		t.Fatalf("VmRSS, RssAnon and RssFile must be positive: %v", st)
	}
	if sum := st[1] + st[2] + st[3]; sum != st[0] {
		t.Errorf("RssAnon %d + RssShmem %d + RssFile %d = %d kB, VmRSS %d kB", st[1], st[2], st[3], sum, st[0])
	}
	if st[4] != 0 {
		t.Errorf("a field /proc/PID/status lacks read as %d, want 0", st[4])
	}
}

// TestEchoServerEchoesAndEndsWithItsInput: the floors' server echoes each
// message as it came, relays one to cat on a PTY and back, and ends once
// its standard input ends, so that it never outlives the run that started
// it.
func TestEchoServerEchoesAndEndsWithItsInput(t *testing.T) {
	in, feed := io.Pipe()
	addrs, out := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- serveEcho(in, out) }()
	addr, err := bufio.NewReader(addrs).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+strings.TrimSpace(addr)+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"a", "", strings.Repeat("z", 16<<10)} {
		if err := c.Write(ctx, websocket.MessageBinary, []byte(m)); err != nil {
			t.Fatal(err)
		}
		if typ, b, err := c.Read(ctx); err != nil || typ != websocket.MessageBinary || string(b) != m {
			t.Fatalf("echo of %d bytes: %v, %d bytes, %v", len(m), typ, len(b), err)
		}
	}
	c.CloseNow()
	r, _, err := websocket.Dial(ctx, "ws://"+strings.TrimSpace(addr)+"/relay", nil)
	if err != nil {
		t.Fatal(err)
	}
	readUntil := func(want string) {
		var got []byte
		for !strings.Contains(string(got), want) {
			_, b, err := r.Read(ctx)
			if err != nil {
				t.Fatalf("relay: waiting for %q after %q: %v", want, got, err)
			}
			got = append(got, b...)
		}
	}
	readUntil("READY")
	if err := r.Write(ctx, websocket.MessageBinary, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	readUntil("hello")
	r.CloseNow()
	feed.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serveEcho: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the echo server did not end with its input")
	}
}
