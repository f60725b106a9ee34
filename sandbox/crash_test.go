//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

// The role of a test binary run again as a launcher that is killed -9.
const (
	envCrashDir     = "TERMGATE_TEST_CRASH_DIR"
	envCrashCgroups = "TERMGATE_TEST_CRASH_CGROUPS"
	envCrashWS      = "TERMGATE_TEST_CRASH_WORKSPACE"
)

// Header of a mappedLog: the committed length, the outstanding
// reservation's last piece (its offset in the high half, its length in
// the low), that piece's canary. The data follows.
const (
	logLen, logIntent, logCanary, logData = 0, 8, 16, 64
	logSize                               = 16 << 20
)

// mappedLog is an output writer whose memory is a shared mapping of a
// file, recovered after its writer was killed at any point, as the
// replay ring's is: the pieces of a reservation before the last were
// read, and the last one too when its canary was overwritten.
type mappedLog struct {
	mem    []byte
	canary [8]byte
	at     int // where the outstanding reservation starts
	max    int
	lent   int
}

func openMappedLog(path string) (*mappedLog, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := f.Truncate(logSize); err != nil {
		return nil, err
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, logSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return &mappedLog{mem: mem}, nil
}

func (m *mappedLog) word(off int) uint64 { return binary.LittleEndian.Uint64(m.mem[off:]) }

func (m *mappedLog) setWord(off int, v uint64) { binary.LittleEndian.PutUint64(m.mem[off:], v) }

func (m *mappedLog) Reserve(max int) {
	m.at, m.max, m.lent = logData+int(m.word(logLen)), max, 0
	if m.at+max > len(m.mem) {
		panic("mapped log full")
	}
}

func (m *mappedLog) Extend(k int) []byte {
	if m.lent+k > m.max {
		panic("extend beyond the reservation")
	}
	at := m.at + m.lent
	rand.Read(m.canary[:])
	copy(m.mem[at:], m.canary[:min(k, 8)])
	copy(m.mem[logCanary:], m.canary[:])
	m.setWord(logIntent, uint64(m.lent)<<32|uint64(k))
	m.lent += k
	return m.mem[at : at+k]
}

func (m *mappedLog) Commit(n int) error {
	m.setWord(logLen, m.word(logLen)+uint64(n))
	m.setWord(logIntent, 0)
	return nil
}

func (m *mappedLog) Write(b []byte) (int, error) { panic("Write on a Reserver") }

// recovered returns what was read, the reservation under way included:
// its earlier pieces, and the last when its canary was overwritten.
func (m *mappedLog) recovered() []byte {
	intent, end := m.word(logIntent), logData+int(m.word(logLen))
	off, k := int(intent>>32), int(intent&0xffffffff)
	end += off
	if c := min(k, 8); k > 0 && !bytes.Equal(m.mem[end:end+c], m.mem[logCanary:logCanary+c]) {
		end += k
	}
	return bytes.Clone(m.mem[logData:end])
}

func (m *mappedLog) close() { unix.Munmap(m.mem) }

// crashPolicies are the executions the crashing launcher starts: a
// shell-like reader on a PTY and a counter on pipes, which waits for a
// line once it has counted.
func crashPolicies(ws string) []Policy {
	return []Policy{
		{Key: "shell", Workspace: ws, TTY: &WindowSize{Rows: 24, Cols: 80},
			Command: sh(`trap 'exit 9' USR1; stty -echo -opost; echo shell-up; while read line; do eval "$line"; done`)},
		{Key: "counter", Workspace: ws, Command: sh(`i=0; while [ $i -lt 200000 ]; do echo $i; i=$((i+1)); done; read x; exit 5`)},
	}
}

// runCrashRole is the launcher that gets killed: it starts the
// executions into mapped logs and waits to die.
func runCrashRole() bool {
	dir := os.Getenv(envCrashDir)
	if dir == "" {
		return false
	}
	fail := func(err error) { fmt.Fprintln(os.Stderr, "crash role:", err); os.Exit(1) }
	l, err := NewLauncher(Config{CgroupParent: os.Getenv(envCrashCgroups), StateDir: dir, StartKeeper: startTestKeeper(dir)})
	if err != nil {
		fail(err)
	}
	for _, p := range crashPolicies(os.Getenv(envCrashWS)) {
		log, err := openMappedLog(filepath.Join(dir, p.Key+".log"))
		if err != nil {
			fail(err)
		}
		if _, err := l.Start(context.Background(), p, Stdio{Stdout: log}); err != nil {
			fail(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "started"), nil, 0o600)
	select {} // until killed
}

// TestKeeperCrashOfTheLauncher: a launcher in another process starts a
// PTY shell and a counter on pipes and is killed -9 mid-output. A new
// launcher adopts both, reads on with no hole and no repeat, types into
// the shell, resizes and signals it, and gets the right exit codes.
func TestKeeperCrashOfTheLauncher(t *testing.T) {
	t.Parallel()
	needLauncher(t)
	dir := keeperDir(t)
	ws := sandboxtest.Dir(t)
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), envCrashDir+"="+dir, envCrashCgroups+"="+testCgroups, envCrashWS+"="+ws)
	child.Stderr = os.Stderr
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			child.Process.Kill()
			child.Wait()
		}
	}()
	logs := map[string]*mappedLog{}
	for _, key := range []string{"shell", "counter"} {
		sandboxtest.Eventually(t, 30*time.Second, func() bool { _, err := os.Stat(filepath.Join(dir, key+".log")); return err == nil })
		log, err := openMappedLog(filepath.Join(dir, key+".log"))
		if err != nil {
			t.Fatal(err)
		}
		defer log.close()
		logs[key] = log
	}
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool {
		return len(logs["counter"].recovered()) > 100<<10 && bytes.Contains(logs["shell"].recovered(), []byte("shell-up"))
	}) {
		t.Fatalf("no output from the crashing launcher: counter %d bytes", len(logs["counter"].recovered()))
	}
	child.Process.Kill()
	child.Wait()
	killed = true
	before := map[string][]byte{}
	for key, log := range logs {
		before[key] = log.recovered()
	}
	l := keeperLauncher(t, dir)
	outs := map[string]*sandboxtest.SyncBuffer{"shell": {}, "counter": {}}
	procs, err := l.Adopt(t.Context(), func(key string) (Stdio, bool) {
		out, ok := outs[key]
		return Stdio{Stdout: out}, ok
	})
	if err != nil || len(procs) != 2 {
		t.Fatalf("adopt: %v, %d processes", err, len(procs))
	}
	byKey := map[string]*Process{}
	for _, p := range procs {
		byKey[p.Key()] = p
	}
	shell, counter := byKey["shell"], byKey["counter"]
	if err := shell.Resize(WindowSize{Rows: 50, Cols: 132}); err != nil {
		t.Error(err)
	}
	shell.Stdin().Write([]byte("stty size; echo typed-$((6*7))\n"))
	waitFor(t, outs["shell"], "typed-42")
	if !strings.Contains(outs["shell"].String(), "50 132") {
		t.Errorf("no new size in %q", outs["shell"].String())
	}
	if err := shell.Signal(unix.SIGUSR1); err != nil {
		t.Error(err)
	}
	if exit, ok := waitReleased(shell, 30*time.Second); !ok || exit.Code != 9 {
		t.Errorf("shell: %s (done %v)", exit, ok)
	}
	if !sandboxtest.Eventually(t, 60*time.Second, func() bool {
		return strings.HasSuffix(string(before["counter"])+outs["counter"].String(), "\n199999\n")
	}) {
		t.Errorf("the counter did not finish: %d bytes after the adoption", outs["counter"].Len())
	}
	counter.Stdin().Write([]byte("\n"))
	if exit, ok := waitReleased(counter, 30*time.Second); !ok || exit.Code != 5 {
		t.Errorf("counter: %s (done %v)", exit, ok)
	}
	got, want := string(before["counter"])+outs["counter"].String(), seqFrom0(200000)
	if got != want {
		t.Errorf("counter output: %d bytes, want %d, first difference at %d (%d before the crash)", len(got), len(want), firstDiff(got, want), len(before["counter"]))
	}
	t.Logf("counter: %d bytes read before the kill -9, %d after the adoption", len(before["counter"]), len(outs["counter"].String()))
}
