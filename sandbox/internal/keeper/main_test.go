//go:build linux

package keeper

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// The test binary doubles as the keeper and as a gateway that the tests
// kill: roleEnv selects the part, the other variables configure it.
const (
	roleEnv      = "KEEPER_TEST_ROLE"
	dirEnv       = "KEEPER_TEST_DIR"
	outEnv       = "KEEPER_TEST_OUT"
	graceEnv     = "KEEPER_TEST_ORPHAN_GRACE"
	killGraceEnv = "KEEPER_TEST_KILL_GRACE"
	lingerEnv    = "KEEPER_TEST_LINGER"
	limitEnv     = "KEEPER_TEST_MAX_CHILDREN"
)

// TestMain runs a role, or the tests with a check that no goroutine
// outlived them.
func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "keeper":
		os.Exit(runKeeper())
	case "gateway":
		os.Exit(runGateway())
	}
	sandboxtest.Main(m, sandboxtest.Ignore(sandboxtest.Forker))
}

// runKeeper serves the directory with JSON logs on stderr.
func runKeeper() int {
	grace, _ := time.ParseDuration(os.Getenv(graceEnv))
	killGrace, _ := time.ParseDuration(os.Getenv(killGraceEnv))
	if d, err := time.ParseDuration(os.Getenv(lingerEnv)); err == nil {
		idleLinger = d
	}
	if n, err := strconv.Atoi(os.Getenv(limitEnv)); err == nil {
		childLimit = n
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	err := Serve(context.Background(), Config{Dir: os.Getenv(dirEnv), OrphanGrace: grace, KillGrace: killGrace, Logger: log})
	if err != nil {
		log.Error("serve", "err", err)
		return 1
	}
	return 0
}

// counter writes 0, 1, 2, ... one per line, at full speed (bounded).
const counter = `i=0; while [ $i -lt 3000000 ]; do echo $i; i=$((i+1)); done`

// gatewayCap bounds what the killed gateway reads per stream.
const gatewayCap = 4 << 20

// runGateway spawns a PTY child and a pipe child that write numbers and
// reads them straight into shared mappings of files in outEnv (so a kill
// at any instruction loses nothing it read: the files end at the first
// NUL), until each holds gatewayCap bytes; then it waits to be killed.
func runGateway() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "gateway:", err); return 1 }
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The test started the keeper; it may not listen yet.
	c, err := Dial(ctx, os.Getenv(dirEnv), func() error { return nil })
	if err != nil {
		return fail(err)
	}
	ptyOut, err := spawnPTYCounter(c, "pty")
	if err != nil {
		return fail(err)
	}
	pipeOut, err := spawnPipeCounter(c, "pipe")
	if err != nil {
		return fail(err)
	}
	var wg sync.WaitGroup
	for key, f := range map[string]*os.File{"pty": ptyOut, "pipe": pipeOut} {
		wg.Go(func() {
			if err := readIntoMapping(f, filepath.Join(os.Getenv(outEnv), key)); err != nil {
				fmt.Fprintln(os.Stderr, "gateway:", key, err)
			}
		})
	}
	wg.Wait()
	select {} // until killed
}

// spawnPTYCounter starts the counter on a terminal; the keeper holds the
// master, returned non-blocking as the sandbox opens it.
func spawnPTYCounter(c *Client, key string) (*os.File, error) {
	master, tty, err := pty.Open()
	if err != nil {
		return nil, err
	}
	defer tty.Close()
	m, err := nonblocking(master)
	if err != nil {
		return nil, err
	}
	_, err = c.Spawn(context.Background(), SpawnRequest{Key: key, Path: "/bin/sh", Args: []string{"sh", "-c", counter},
		Files: []*os.File{tty, tty, tty}, Held: []*os.File{m}})
	return m, err
}

// spawnPipeCounter starts the counter with its stdout on a pipe whose
// read end the keeper holds.
func spawnPipeCounter(c *Client, key string) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer w.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer null.Close()
	_, err = c.Spawn(context.Background(), SpawnRequest{Key: key, Path: "/bin/sh", Args: []string{"sh", "-c", counter},
		Files: []*os.File{null, w, w}, Held: []*os.File{r}})
	return r, err
}

func nonblocking(f *os.File) (*os.File, error) {
	defer f.Close()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// readIntoMapping reads f into a shared mapping of path until it is full.
func readIntoMapping(f *os.File, path string) error {
	out, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	if err := out.Truncate(gatewayCap); err != nil {
		return err
	}
	mem, err := unix.Mmap(int(out.Fd()), 0, gatewayCap, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	for off := 0; off < len(mem); {
		n, err := f.Read(mem[off:min(off+4096, len(mem))])
		off += n
		if err != nil {
			return err
		}
	}
	return nil
}

// mappedOutput returns what a gateway read into path: up to the first NUL.
func mappedOutput(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return b
}

// stateDir returns a fresh 0700 directory with a short path (a socket
// path is limited to 108 bytes).
func stateDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	state := filepath.Join(dir, "s")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	return state
}

// keeperProcs starts keepers for a test and kills whatever still runs
// when it ends.
type keeperProcs struct {
	t       *testing.T
	dir     string
	env     []string
	mu      sync.Mutex
	started []*keeperProc
}

type keeperProc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once reaped
}

func newKeepers(t *testing.T, dir string, grace, killGrace, linger time.Duration) *keeperProcs {
	k := &keeperProcs{t: t, dir: dir, env: []string{roleEnv + "=keeper", dirEnv + "=" + dir,
		graceEnv + "=" + grace.String(), killGraceEnv + "=" + killGrace.String(), lingerEnv + "=" + linger.String()}}
	t.Cleanup(k.killAll)
	return k
}

// start starts one more keeper (the start function of Dial).
func (k *keeperProcs) start() error {
	log := filepath.Join(filepath.Dir(k.dir), fmt.Sprintf("keeper%d.log", len(k.started)))
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), k.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &keeperProc{cmd: cmd, log: log, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	k.mu.Lock()
	k.started = append(k.started, p)
	k.mu.Unlock()
	return nil
}

func (k *keeperProcs) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.started)
}

func (k *keeperProcs) last() *keeperProc {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.started[len(k.started)-1]
}

func (k *keeperProcs) killAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.started {
		p.cmd.Process.Kill()
		<-p.done
	}
}

// dial connects to the test's keeper, starting one when none listens.
func (k *keeperProcs) dial(t *testing.T) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c, err := Dial(ctx, k.dir, k.start)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	return c
}

// logEntries parses a keeper's JSON log.
func (p *keeperProc) logEntries(t *testing.T) []map[string]any {
	t.Helper()
	f, err := os.Open(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e map[string]any
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// waitFor polls cond every 10ms for at most timeout.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// gone reports whether pid no longer exists at all (it was reaped).
func gone(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return errors.Is(err, os.ErrNotExist)
}

func devNull(t *testing.T) *os.File {
	t.Helper()
	f, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// shSpawn runs script under sh with /dev/null as stdio.
func shSpawn(t *testing.T, c *Client, key, script string, extra ...func(*SpawnRequest)) int {
	t.Helper()
	null := devNull(t)
	req := SpawnRequest{Key: key, Path: "/bin/sh", Args: []string{"sh", "-c", script}, Files: []*os.File{null, null, null}}
	for _, f := range extra {
		f(&req)
	}
	sp, err := c.Spawn(t.Context(), req)
	if err != nil {
		t.Fatalf("spawn %s: %v", key, err)
	}
	return sp.Pid
}

func itoa(i int) string { return strconv.Itoa(i) }

func credNobody() *syscall.Credential {
	return &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}
}
