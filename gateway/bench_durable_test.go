package gateway

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
)

// Durable executions (a state directory: the keeper forks the sandboxes,
// the rings live in mapped files, output is read into them) against the
// in-memory ones, in one run: issue 14's budgets are PTY throughput at
// least 95% of in-memory, keystroke echo p50 at most 20 µs above, and at
// most 256 KiB of extra memory per execution.

// envKeeperDir, set, makes the test binary the keeper of that directory.
const envKeeperDir = "TERMGATE_GATEWAY_TEST_KEEPER"

// runKeeperRole serves as the keeper when the test binary was started for
// it; TestMain then exits.
func runKeeperRole() {
	dir := os.Getenv(envKeeperDir)
	if dir == "" {
		return
	}
	if strings.HasPrefix(dir, "start:") { // detach: the keeper must outlive its starter
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), envKeeperDir+"="+strings.TrimPrefix(dir, "start:"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		err := cmd.Start()
		if err != nil {
			fmt.Fprintln(os.Stderr, "start keeper:", err)
		}
		os.Exit(map[bool]int{true: 0, false: 1}[err == nil])
	}
	err := sandbox.ServeKeeper(context.Background(), sandbox.Config{StateDir: dir, OrphanGrace: time.Minute, KillGrace: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "keeper:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// durableSession returns a session config whose launcher and supervisor
// keep their state in a fresh directory on tmpfs, with its own keeper.
func durableSession(b *testing.B) (session.Config, string) {
	b.Helper()
	l, dir := durableLauncher(b)
	return session.Config{Launcher: session.SandboxLauncher(l), StateDir: dir}, dir
}

// durableLauncher is durableSession's launcher and state directory.
func durableLauncher(b *testing.B) (*sandbox.Launcher, string) {
	b.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "tgbench")
	if err != nil {
		b.Fatal(err)
	}
	parent := sandboxtest.SharedCgroupParent("gateway-durable")
	l, err := sandbox.NewLauncher(sandbox.Config{KillGrace: 500 * time.Millisecond, CgroupParent: parent, StateDir: dir,
		StartKeeper: func() error {
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), envKeeperDir+"=start:"+dir)
			return cmd.Run()
		}})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := l.Adopt(context.Background(), func(string) (sandbox.Stdio, bool) { return sandbox.Stdio{}, false }); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		l.Close()
		for range 200 { // the keeper lingers a few seconds once it has no children
			if keeperPid(dir) == 0 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if pid := keeperPid(dir); pid != 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		os.RemoveAll(dir)
		sandboxtest.RemoveCgroupParent(parent)
	})
	return l, dir
}

// keeperPid finds the keeper of dir among the processes, 0 if none.
func keeperPid(dir string) int {
	want := []byte(envKeeperDir + "=" + dir + "\x00")
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if env, err := os.ReadFile("/proc/" + e.Name() + "/environ"); err == nil && bytes.Contains(env, want) {
			return pid
		}
	}
	return 0
}

// rssKiB is a process's resident memory.
func rssKiB(pid int) int {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return 0
}

// diskKiB is what the files under dir take (tmpfs pages).
func diskKiB(dir string) int64 {
	var total int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				total += st.Blocks * 512
			}
		}
		return nil
	})
	return total / 1024
}

// BenchmarkDurable compares durable executions with in-memory ones:
// PTY throughput to an acknowledging client, keystroke echo, and the
// memory of 200 idle shells (the server's heap and stacks, the keeper's
// resident memory, the state files' pages).
func BenchmarkDurable(b *testing.B) {
	for _, durable := range []bool{false, true} {
		name := map[bool]string{false: "memory", true: "durable"}[durable]
		config := func(b *testing.B) (session.Config, string) {
			if durable {
				return durableSession(b)
			}
			return session.Config{Launcher: session.SandboxLauncher(needLauncher(b))}, ""
		}
		b.Run("pty-acked/"+name, func(b *testing.B) {
			sc, _ := config(b)
			benchPTYOn(b, newEnvSession(b, sc, func(c *Config) { c.Sandbox.MaxTimeout = time.Hour }), true)
		})
		b.Run("echo/"+name, func(b *testing.B) {
			sc, _ := config(b)
			benchEchoOn(b, newEnvSession(b, sc, func(c *Config) { c.Sandbox.MaxTimeout = time.Hour; c.InputPerSecond = 1 << 20 }), false)
		})
		b.Run("idle-200/"+name, func(b *testing.B) {
			sc, dir := config(b)
			sc.MaxRunning, sc.MaxRunningPerOwner, sc.MaxRetained, sc.MaxRetainedPerOwner = 400, 400, 400, 400
			e := newEnvSession(b, sc, func(c *Config) { c.StartsPerMinute, c.MaxConnsPerSubject = 1<<20, 64 })
			round := 0
			for b.Loop() {
				round++
				benchIdle(b, e, dir, fmt.Sprintf("idle-%d-", round), 200)
			}
		})
	}
}

// benchIdle starts n idle PTY shells, their IDs starting with prefix,
// reports what each costs and ends them.
func benchIdle(b *testing.B, e *testEnv, dir, prefix string, n int) {
	c := e.dial(b, e.token(b, "bench", allScopes...))
	defer c.close()
	c.send(b, wire.Request{Type: wire.TypeStart, ID: prefix + "warm", PTY: &wire.Size{Rows: 24, Cols: 80}, Command: "/bin/sh", TimeoutMS: 3600_000})
	c.expect(b, wire.MsgStarted)
	time.Sleep(time.Second)
	keeper := keeperPid(dir)
	before, keeperBefore, filesBefore := memUse(), rssKiB(keeper), diskKiB(dir)
	startIdleShells(b, e, prefix, n, 4)
	time.Sleep(idleSettle) // every shell reached its prompt and went idle
	b.ReportMetric(float64(memUse()-before)/float64(n)/1024, "server-KiB/execution")
	if dir != "" {
		b.ReportMetric(float64(rssKiB(keeper)-keeperBefore)/float64(n), "keeper-KiB/execution")
		b.ReportMetric(float64(diskKiB(dir)-filesBefore)/float64(n), "files-KiB/execution")
	}
	endShells(b, e, prefix)
}
