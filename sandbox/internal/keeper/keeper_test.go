//go:build linux

package keeper

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

// contiguous checks that b holds the complete lines 0, 1, 2, ... (the last
// one possibly cut short) and returns how many whole ones.
func contiguous(b []byte) (int, error) {
	fields := strings.Fields(string(b))
	if len(b) > 0 && !strings.ContainsRune(" \r\n", rune(b[len(b)-1])) {
		fields = fields[:len(fields)-1]
	}
	for i, f := range fields {
		if f != strconv.Itoa(i) {
			return i, fmt.Errorf("line %d is %q (after %q)", i, f, fields[max(0, i-3):i])
		}
	}
	return len(fields), nil
}

// TestAdoptAfterGatewayKill kills a gateway process while its children
// write as fast as they can; a new gateway adopts them and reads on from
// the held descriptors without a hole: while nobody reads, the children block.
func TestAdoptAfterGatewayKill(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	out := filepath.Dir(dir)
	ks := newKeepers(t, dir, time.Minute, time.Second, 5*time.Second)
	if err := ks.start(); err != nil {
		t.Fatal(err)
	}
	var stderr sandboxtest.SyncBuffer
	gw := exec.Command(os.Args[0], "-test.run=^$")
	gw.Env = append(os.Environ(), roleEnv+"=gateway", dirEnv+"="+dir, outEnv+"="+out)
	gw.Stderr = &stderr
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Process.Kill(); gw.Wait() })
	if !waitFor(30*time.Second, func() bool {
		return len(mappedOutput(t, filepath.Join(out, "pty"))) >= 64<<10 && len(mappedOutput(t, filepath.Join(out, "pipe"))) >= 64<<10
	}) {
		t.Fatalf("the gateway did not read 64 KiB of each stream: %s", stderr.String())
	}
	if err := gw.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	gw.Wait()

	c := ks.dial(t)
	defer c.Detach()
	if ks.count() != 1 {
		t.Fatalf("%d keepers started, want the first one to adopt", ks.count())
	}
	children := c.Children()
	if keys := keysOf(children); !slices.Equal(keys, []string{"pty", "pipe"}) {
		t.Fatalf("children %v, want [pty pipe]", keys)
	}
	for _, ch := range children {
		if ch.Exited || len(ch.Held) != 1 {
			t.Fatalf("child %s: exited %v with %d held descriptors, want running with 1", ch.Key, ch.Exited, len(ch.Held))
		}
		before := mappedOutput(t, filepath.Join(out, ch.Key))
		after := readAtLeast(t, ch.Held[0], 256<<10)
		n, err := contiguous(append(before, after...))
		if err != nil {
			t.Errorf("%s: %d bytes before the kill, %d after: %v", ch.Key, len(before), len(after), err)
		}
		t.Logf("%s: %d bytes read before the kill, %d after, %d numbers in sequence", ch.Key, len(before), len(after), n)
	}
	stopChildren(t, c, children)
}

func keysOf(children []Child) []string {
	var keys []string
	for _, ch := range children {
		keys = append(keys, ch.Key)
	}
	return keys
}

// readAtLeast reads f until it has n bytes, within a bounded time.
func readAtLeast(t *testing.T, f *os.File, n int) []byte {
	t.Helper()
	if err := f.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatalf("read deadline on %s: %v", f.Name(), err)
	}
	var b bytes.Buffer
	buf := make([]byte, 32<<10)
	for b.Len() < n {
		k, err := f.Read(buf)
		b.Write(buf[:k])
		if err != nil {
			t.Fatalf("read %s after %d bytes: %v", f.Name(), b.Len(), err)
		}
	}
	return b.Bytes()
}

// stopChildren kills the children's sessions, collects their exits and
// forgets them, closing what the test held.
func stopChildren(t *testing.T, c *Client, children []Child) {
	t.Helper()
	for _, ch := range children {
		unix.Kill(-ch.Pid, unix.SIGKILL)
		select {
		case ws, ok := <-c.Exit(ch.Key):
			if !ok || !ws.Signaled() {
				t.Errorf("exit of %s: %v (delivered %v), want a signal", ch.Key, ws, ok)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("no exit of %s", ch.Key)
		}
		if err := c.Forget(ch.Key); err != nil {
			t.Errorf("forget %s: %v", ch.Key, err)
		}
		closeAll(ch.Held)
	}
}

// TestExitWhileDetached: a child that exits while no gateway is attached
// keeps its status for the next one; Forget drops it.
func TestExitWhileDetached(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	ks := newKeepers(t, dir, time.Minute, time.Second, 5*time.Second)
	c := ks.dial(t)
	goFile := filepath.Join(filepath.Dir(dir), "go")
	pid := shSpawn(t, c, "x", fmt.Sprintf(`n=0; while [ ! -e %s ] && [ $n -lt 3000 ]; do sleep 0.01; n=$((n+1)); done; exit 7`, goFile))
	pidY := shSpawn(t, c, "y", `sleep 1000`)
	if err := c.Detach(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Lost():
	default:
		t.Fatal("Lost not closed after Detach")
	}
	if err := os.WriteFile(goFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if !waitFor(10*time.Second, func() bool { return gone(pid) }) {
		t.Fatal("the keeper did not reap the child while detached")
	}

	c = ks.dial(t)
	children := c.Children()
	if len(children) != 2 || !children[0].Exited || children[0].Status.ExitStatus() != 7 || children[1].Exited {
		t.Fatalf("children %+v, want x exited 7 and y running", children)
	}
	if ws, ok := <-c.Exit("x"); !ok || ws.ExitStatus() != 7 {
		t.Errorf("Exit(x) = %v, %v; want status 7", ws, ok)
	}
	if err := c.Forget("y"); !errors.Is(err, ErrStillRunning) {
		t.Errorf("Forget of a running child: %v, want ErrStillRunning", err)
	}
	if err := c.Forget("x"); err != nil {
		t.Fatalf("forget: %v", err)
	}
	if err := c.Forget("x"); !errors.Is(err, ErrUnknown) {
		t.Errorf("second Forget: %v, want ErrUnknown", err)
	}
	if _, ok := <-c.Exit("x"); ok {
		t.Error("Exit of a forgotten key delivered a status")
	}
	keeperPid := c.Pid()
	c.Detach()

	c = ks.dial(t)
	defer c.Detach()
	if c.Pid() != keeperPid || ks.count() != 1 {
		t.Fatalf("keeper pid %d (started %d), want the same keeper %d", c.Pid(), ks.count(), keeperPid)
	}
	if keys := keysOf(c.Children()); !slices.Equal(keys, []string{"y"}) {
		t.Fatalf("children after Forget: %v, want [y]", keys)
	}
	if !running(pidY) {
		t.Fatal("y stopped")
	}
	stopChildren(t, c, c.Children())
}

// TestOrphanGrace: with no gateway for the grace, children get SIGTERM
// (a trap proves it), then SIGKILL; the cgroups and Remove paths are
// removed and the keeper exits.
func TestOrphanGrace(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	scratch := filepath.Dir(dir)
	ks := newKeepers(t, dir, 300*time.Millisecond, 500*time.Millisecond, 5*time.Second)
	c := ks.dial(t)
	keeper := ks.last()

	var cgroups []string
	useCgroups := os.Geteuid() == 0
	if useCgroups {
		parent := sandboxtest.CgroupParent(t)
		for _, hier := range sandboxtest.CgroupHierarchies(t) {
			cg := filepath.Join(hier, parent, "b")
			if err := os.MkdirAll(filepath.Join(cg, "inner"), 0o755); err != nil {
				t.Fatal(err)
			}
			cgroups = append(cgroups, cg)
		}
	} else if sandboxtest.InCI() {
		t.Fatal("CI=true: cgroups need root")
	}
	state := filepath.Join(dir, "executions", "b")
	if err := os.MkdirAll(filepath.Join(state, "deep"), 0o700); err != nil {
		t.Fatal(err)
	}
	trapped := filepath.Join(scratch, "trapped")
	release := filepath.Join(scratch, "release")
	escaped := filepath.Join(scratch, "escaped")
	wait := fmt.Sprintf(`n=0; while [ ! -e %s ] && [ $n -lt 3000 ]; do sleep 0.01; n=$((n+1)); done; `, release)
	// a leaves on SIGTERM; b ignores it (so only SIGKILL ends it) and
	// starts a process in a session of its own, reachable only through
	// the cgroup.
	shSpawn(t, c, "a", wait+fmt.Sprintf(`trap 'echo a >> %s; exit 0' TERM; n=0; while [ $n -lt 20000 ]; do sleep 0.05; n=$((n+1)); done`, trapped))
	pidB := shSpawn(t, c, "b", wait+fmt.Sprintf(`trap 'echo b >> %s' TERM; setsid sleep 1000 & echo $! > %s; n=0; while [ $n -lt 20000 ]; do sleep 0.05; n=$((n+1)); done`, trapped, escaped),
		func(r *SpawnRequest) { r.Cgroups, r.Remove = cgroups, []string{state} })
	for _, cg := range cgroups {
		if err := os.WriteFile(filepath.Join(cg, "inner", "cgroup.procs"), []byte(strconv.Itoa(pidB)), 0); err != nil {
			t.Fatalf("move b into %s: %v", cg, err)
		}
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var escapedPid int
	if !waitFor(10*time.Second, func() bool {
		b, _ := os.ReadFile(escaped)
		escapedPid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return escapedPid > 0
	}) {
		t.Fatal("b did not start its escaped process")
	}
	c.Detach()

	select {
	case <-keeper.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the keeper did not exit after the orphan grace")
	}
	if code := keeper.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("keeper exit code %d", code)
	}
	got, _ := os.ReadFile(trapped)
	if lines := strings.Fields(string(got)); !slices.Contains(lines, "a") || !slices.Contains(lines, "b") {
		t.Errorf("trap file %q: want both children to have seen SIGTERM", got)
	}
	log := keeper.logEntries(t)
	checkSignalOrder(t, log, "b", []string{"terminated", "killed"})
	checkSignalOrder(t, log, "a", []string{"terminated"})
	if !logHas(log, "child exited", "b", "signal killed") {
		t.Errorf("b did not end by SIGKILL: %v", log)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the Remove path is still there: %v", err)
	}
	for _, cg := range cgroups {
		if _, err := os.Stat(cg); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s is still there: %v", cg, err)
		}
	}
	if useCgroups && !waitFor(5*time.Second, func() bool { return !running(escapedPid) }) {
		t.Errorf("the escaped process %d still runs", escapedPid)
	}
	if !running(escapedPid) {
		return
	}
	unix.Kill(escapedPid, unix.SIGKILL) // without cgroups nothing could reach it
}

// checkSignalOrder checks the keeper logged signals to key in this order.
func checkSignalOrder(t *testing.T, log []map[string]any, key string, want []string) {
	t.Helper()
	var got []string
	for _, e := range log {
		if e["msg"] == "signalled" && e["key"] == key {
			got = append(got, fmt.Sprint(e["signal"]))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("signals to %s: %v, want %v", key, got, want)
	}
}

func logHas(log []map[string]any, msg, key, status string) bool {
	return slices.ContainsFunc(log, func(e map[string]any) bool {
		return e["msg"] == msg && e["key"] == key && e["status"] == status
	})
}

// TestKeeperKilled: a keeper killed by SIGKILL takes its children with it
// (Pdeathsig); the gateway sees Lost and no exit status.
func TestKeeperKilled(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	ks := newKeepers(t, dir, time.Minute, time.Second, 5*time.Second)
	c := ks.dial(t)
	defer c.Detach()
	// Pdeathsig reaches the keeper's child alone (in production bwrap,
	// whose sandbox dies with it): the child here is sleep itself.
	null := devNull(t)
	sp, err := c.Spawn(t.Context(), SpawnRequest{Key: "s", Path: "/bin/sleep", Args: []string{"sleep", "1000"}, Files: []*os.File{null, null, null}})
	if err != nil {
		t.Fatal(err)
	}
	pid := sp.Pid
	exit := c.Exit("s")
	if err := ks.last().cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost not closed after the keeper was killed")
	}
	if ws, ok := <-exit; ok {
		t.Errorf("exit status %v delivered for a child of a killed keeper", ws)
	}
	if !waitFor(10*time.Second, func() bool { return len(sessionMembers(pid)) == 0 }) {
		t.Fatalf("processes %v of child %d's session outlived its keeper", sessionMembers(pid), pid)
	}
	if _, err := c.Spawn(t.Context(), SpawnRequest{Key: "t", Path: "/bin/true"}); !errors.Is(err, ErrLost) {
		t.Errorf("Spawn after the keeper died: %v, want ErrLost", err)
	}
}

// TestSecondGatewayRefused: one gateway at a time; the refusal names the
// attached one's pid. Once it detached, the next one attaches.
func TestSecondGatewayRefused(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	ks := newKeepers(t, dir, time.Minute, time.Second, 5*time.Second)
	c := ks.dial(t)
	_, err := Dial(t.Context(), dir, ks.start)
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second dial: %v, want ErrBusy naming pid %d", err, os.Getpid())
	}
	t.Logf("refused: %v", err)
	c.Detach()
	c = ks.dial(t)
	c.Detach()
	if ks.count() != 1 {
		t.Errorf("%d keepers started, want 1", ks.count())
	}
}

// TestServeRefusesDir: Serve runs only on a private directory of ours,
// and only once per directory.
func TestServeRefusesDir(t *testing.T) {
	t.Parallel()
	served := stateDir(t)
	ks := newKeepers(t, served, time.Minute, time.Second, 5*time.Second)
	ks.dial(t).Detach()
	cases := []struct {
		name  string
		setup func(t *testing.T) string
		want  error
		text  string
	}{
		{"mode 0755", func(t *testing.T) string {
			d := stateDir(t)
			os.Chmod(d, 0o755)
			return d
		}, ErrDir, "mode 0755"},
		{"mode 0710", func(t *testing.T) string {
			d := stateDir(t)
			os.Chmod(d, 0o710)
			return d
		}, ErrDir, "mode 0710"},
		{"missing", func(t *testing.T) string { return filepath.Join(stateDir(t), "none") }, ErrDir, "no such file"},
		{"a file", func(t *testing.T) string {
			p := filepath.Join(stateDir(t), "f")
			os.WriteFile(p, nil, 0o700)
			return p
		}, ErrDir, "not a directory"},
		{"a symbolic link", func(t *testing.T) string {
			d := stateDir(t)
			p := filepath.Join(filepath.Dir(d), "link")
			os.Symlink(d, p)
			return p
		}, ErrDir, "is a symbolic link"},
		{"in a parent others may write", func(t *testing.T) string {
			d := stateDir(t)
			os.Chmod(filepath.Dir(d), 0o777)
			return d
		}, ErrDir, "writable by others, and not sticky"},
		{"in another user's parent", func(t *testing.T) string {
			if os.Geteuid() != 0 {
				t.Skip("needs root to chown")
			}
			d := stateDir(t)
			os.Chown(filepath.Dir(d), 65534, 65534)
			return d
		}, ErrDir, "owned by uid 65534, who may replace it"},
		{"another owner", func(t *testing.T) string {
			if os.Geteuid() != 0 {
				t.Skip("needs root to chown")
			}
			d := stateDir(t)
			os.Chown(d, 65534, 65534)
			return d
		}, ErrDir, "owned by uid 65534"},
		{"served already", func(t *testing.T) string { return served }, ErrRunning, "locked"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Serve(t.Context(), Config{Dir: tc.setup(t)})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("Serve: %v, want %v mentioning %q", err, tc.want, tc.text)
			}
		})
	}
}

// TestDialRefusesDir: Dial checks the directory before it dials or
// starts a keeper there: an unsafe one is refused at once, with the
// reason, and nothing is started.
func TestDialRefusesDir(t *testing.T) {
	t.Parallel()
	d := stateDir(t)
	sticky := stateDir(t)
	os.Chmod(filepath.Dir(sticky), os.ModeSticky|0o777)
	os.Chmod(d, 0o755)
	started := false
	_, err := Dial(t.Context(), d, func() error { started = true; return nil })
	if !errors.Is(err, ErrDir) || !strings.Contains(err.Error(), "mode 0755") || started {
		t.Fatalf("Dial: %v (keeper started: %v), want ErrDir naming mode 0755 and no start", err, started)
	}
	// A sticky parent others may write is fine for an entry of ours.
	if _, err := CheckDir(filepath.Join(filepath.Dir(sticky), "new"), true); err != nil {
		t.Fatalf("CheckDir in a sticky parent: %v", err)
	}
}

// TestCheckDirTightensAFreshMountPoint: a directory of ours with a wider
// mode, such as a Kubernetes emptyDir (0777) mounted where serve keeps its
// state, is made 0700 and taken while it is empty; one that holds anything
// is refused, since anyone could have put it there.
func TestCheckDirTightensAFreshMountPoint(t *testing.T) {
	t.Parallel()
	fresh, used := stateDir(t), stateDir(t)
	for _, d := range []string{fresh, used} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(used, "keeper.log"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckDir(fresh, false); !errors.Is(err, ErrDir) {
		t.Errorf("CheckDir without create: %v, want ErrDir: only the one that makes the directory tightens it", err)
	}
	if _, err := CheckDir(fresh, true); err != nil {
		t.Fatalf("CheckDir of an empty 0777 directory of ours: %v", err)
	}
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the fresh directory afterwards: %v %v, want mode 0700", fi.Mode(), err)
	}
	_, err := CheckDir(used, true)
	if !errors.Is(err, ErrDir) || !strings.Contains(err.Error(), "had mode 0777 and holds entries others may have made (keeper.log)") {
		t.Fatalf("CheckDir of a 0777 directory holding a file: %v, want ErrDir naming the entry", err)
	}
}

// TestStaleSocketReplaced: a socket left by a dead keeper does not stop
// the next one.
func TestStaleSocketReplaced(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	ks := newKeepers(t, dir, time.Minute, time.Second, 5*time.Second)
	c := ks.dial(t)
	ks.last().cmd.Process.Kill()
	<-ks.last().done
	<-c.Lost()
	c.Detach()
	if _, err := os.Lstat(filepath.Join(dir, SocketName)); err != nil {
		t.Fatalf("the killed keeper left no socket to test with: %v", err)
	}
	c = ks.dial(t)
	defer c.Detach()
	if ks.count() != 2 {
		t.Fatalf("%d keepers started, want 2", ks.count())
	}
	fi, err := os.Lstat(filepath.Join(dir, SocketName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v, mode %v; want 0600", err, fi.Mode())
	}
}

// TestIdleKeeperExits: with neither children nor a gateway, the keeper
// exits after its linger.
func TestIdleKeeperExits(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	ks := newKeepers(t, dir, time.Minute, time.Second, 200*time.Millisecond)
	c := ks.dial(t)
	shSpawn(t, c, "q", `exit 3`)
	if ws := <-c.Exit("q"); ws.ExitStatus() != 3 {
		t.Fatalf("status %v, want 3", ws)
	}
	c.Forget("q")
	c.Detach()
	select {
	case <-ks.last().done:
	case <-time.After(20 * time.Second):
		t.Fatal("an idle keeper did not exit")
	}
	if !slices.ContainsFunc(ks.last().logEntries(t), func(e map[string]any) bool {
		return e["msg"] == "keeper exiting" && e["reason"] == "idle"
	}) {
		t.Errorf("no idle exit logged")
	}
	if _, err := os.Lstat(filepath.Join(dir, SocketName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket outlived its keeper: %v", err)
	}
}

// sessionMembers lists the live processes in session sid.
func sessionMembers(sid int) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := unix.Getsid(pid); err == nil && s == sid && running(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestChildLimit: a keeper holds at most its limit of children, exited
// ones included until they are forgotten.
func TestChildLimit(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	ks := newKeepers(t, dir, time.Minute, time.Second, 5*time.Second)
	ks.env = append(ks.env, limitEnv+"=2")
	c := ks.dial(t)
	defer c.Detach()
	shSpawn(t, c, "one", `exit 0`)
	shSpawn(t, c, "two", `exit 0`)
	<-c.Exit("one")
	_, err := c.Spawn(t.Context(), SpawnRequest{Key: "three", Path: "/bin/true"})
	if !errors.Is(err, ErrFull) {
		t.Fatalf("third spawn: %v, want ErrFull", err)
	}
	if err := c.Forget("one"); err != nil {
		t.Fatal(err)
	}
	shSpawn(t, c, "three", `exit 0`)
	<-c.Exit("two")
	<-c.Exit("three")
}
