//go:build linux

package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// server is a `termgate serve` this program started and stops.
type server struct {
	cmd      *exec.Cmd
	pid      int
	addr     string // where it listens, on 127.0.0.1
	metrics  string // where its metrics and pprof listen; "" without -cpuprofile or -heapprofile
	token    string
	dir      string // its secret and workspaces, removed by stop
	state    string // its state directory, removed by stop
	cgParent string
	logs     *logTail
	done     chan struct{} // closed when the process was waited for
	stopOnce sync.Once
	stopErr  error
}

// stopGrace is how long stop waits after SIGTERM before SIGKILL: serve
// ends its executions first (TERM, a grace, KILL).
const stopGrace = 30 * time.Second

// startServer runs serve with limits that let o's load through and waits
// until it listens.
func startServer(ctx context.Context, o options) (_ *server, err error) {
	dir, err := os.MkdirTemp("", "termgate-load-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o711); err != nil { // the sandbox identity reaches the workspaces through it
		os.RemoveAll(dir)
		return nil, err
	}
	s := &server{dir: dir, cgParent: fmt.Sprintf("termgate-load-%d", os.Getpid()), logs: &logTail{}, done: make(chan struct{})}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	if s.state, err = os.MkdirTemp(stateParent(), "termgate-load-state-"); err != nil {
		return nil, err
	}
	secret := filepath.Join(dir, "secret")
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.WriteFile(secret, []byte(hex.EncodeToString(key)), 0o600); err != nil {
		return nil, err
	}
	if s.token, err = mintToken(ctx, o.termgate, secret); err != nil {
		return nil, err
	}
	s.cmd = exec.Command(o.termgate, serveArgs(o, dir, s.state, secret, s.cgParent)...)
	s.cmd.Stdout = io.Discard
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start serve: %w", err)
	}
	s.pid = s.cmd.Process.Pid
	listening := make(chan string, 1)
	go s.logs.follow(stderr, listening) // ends with serve's stderr
	go func() { s.cmd.Wait(); close(s.done) }()
	select {
	case s.addr = <-listening:
		s.metrics = s.logs.metricsAddr()
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("serve ended before it listened: %s", s.logs.String())
	case <-ctx.Done():
		return nil, fmt.Errorf("serve listens: %w", ctx.Err())
	}
}

// serveArgs are serve's flags: 127.0.0.1 only, and every limit above what
// the load asks for, but the input rate (its default unless asked).
// SIGTERM shuts down for good: a run cut short leaves no shells for the
// keeper to hold through its orphan grace.
func serveArgs(o options, dir, state, secret, cgParent string) []string {
	room := strconv.Itoa(o.shells + 16)
	args := []string{"serve", "--listen", "127.0.0.1:0", "--jwt-secret-file", secret,
		"--workspace-root", filepath.Join(dir, "ws"), "--state-dir", state,
		"--cgroup-parent", cgParent, "--starts-per-minute", "1000000", "--sigterm", "shutdown",
		"--max-running", room, "--max-running-per-tenant", room, "--max-retained", room, "--max-retained-per-tenant", room,
		"--max-conns-per-subject", room, "--max-conns", room, "--max-conns-per-addr", room}
	if o.inputPerSecond > 0 {
		args = append(args, "--input-per-second", strconv.Itoa(o.inputPerSecond))
	}
	if o.cpuProfile != "" || o.heapProfile != "" {
		args = append(args, "--metrics-listen", "127.0.0.1:0")
	}
	return args
}

// stateParent is where the state directory goes: on tmpfs, as serve's
// default state directory is, where one exists. On a disk file system
// each start's files cost an inode search (ext4: about a third of the
// server's CPU per start), which serve's default never pays.
func stateParent() string {
	var st unix.Statfs_t
	if unix.Statfs("/dev/shm", &st) == nil && st.Type == unix.TMPFS_MAGIC {
		return "/dev/shm"
	}
	return os.TempDir()
}

// mintToken asks termgate for an hour's token of tenant load.
func mintToken(ctx context.Context, bin, secret string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, "token", "--secret-file", secret, "--tenant", "load", "--ttl", "1h").Output()
	if err != nil {
		return "", fmt.Errorf("mint a token: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// stop ends serve by its pid (SIGTERM, SIGKILL after stopGrace), then
// removes its cgroup parent and directory. Idempotent.
func (s *server) stop() error {
	s.stopOnce.Do(func() {
		if s.cmd != nil && s.cmd.Process != nil {
			s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.done:
			case <-time.After(stopGrace):
				s.cmd.Process.Kill()
				<-s.done
				s.stopErr = fmt.Errorf("serve did not stop in %v: killed", stopGrace)
			}
		}
		s.stopErr = errors.Join(s.stopErr, removeCgroupParent(s.cgParent), os.RemoveAll(s.dir))
		if s.state != "" {
			s.stopErr = errors.Join(s.stopErr, os.RemoveAll(s.state))
		}
	})
	return s.stopErr
}

// logTail keeps the last of serve's log for errors.
type logTail struct {
	mu      sync.Mutex
	lines   []string
	metrics string // the address of the "metrics listening" line
}

func (l *logTail) metricsAddr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.metrics
}

// follow reads r's JSON log lines, keeps the address of the "metrics
// listening" line (logged before the other) and sends the address of the
// first "listening" line to listening.
func (l *logTail) follow(r io.Reader, listening chan<- string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	sent := false
	for sc.Scan() {
		line := sc.Text()
		var rec struct{ Msg, Addr string }
		json.Unmarshal([]byte(line), &rec)
		l.mu.Lock()
		l.lines = append(l.lines[max(0, len(l.lines)-19):], line)
		if rec.Msg == "metrics listening" && l.metrics == "" {
			l.metrics = rec.Addr
		}
		l.mu.Unlock()
		if !sent && rec.Msg == "listening" && rec.Addr != "" {
			listening <- rec.Addr
			sent = true
		}
	}
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// removeCgroupParent removes the directories of parent, deepest first,
// in every cgroup hierarchy, retrying for 5 s while the last processes of
// serve's executions leave them.
func removeCgroupParent(parent string) error {
	var dirs []string
	for _, root := range cgroupRoots() {
		filepath.WalkDir(filepath.Join(root, parent), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, d := range slices.Backward(dirs) {
		for {
			err := syscall.Rmdir(d)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("remove cgroup %s: %w", d, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// cgroupRoots are the mounted cgroup hierarchies: /sys/fs/cgroup itself
// when it is cgroup v2, else its subdirectories (v1 controllers and a
// hybrid system's unified one).
func cgroupRoots() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}
	}
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	var roots []string
	for _, e := range ents {
		if e.IsDir() {
			roots = append(roots, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return roots
}
