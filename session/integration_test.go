package session_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	. "github.com/termgate/termgate/session"
	"golang.org/x/sys/unix"
)

// integrationLauncher is the real sandbox the integration tests share,
// under a cgroup parent of its own.
var integrationLauncher = sandboxtest.Shared[*sandbox.Launcher]{
	What: "sandbox (install bubblewrap)",
	New: func() (*sandbox.Launcher, error) {
		return sandbox.NewLauncher(sandbox.Config{KillGrace: testGrace, CgroupParent: sessionCgroups})
	},
	Close: func(l *sandbox.Launcher) {
		l.Close()
		sandboxtest.RemoveCgroupParent(sessionCgroups)
	},
}

var sessionCgroups = sandboxtest.SharedCgroupParent("session")

const testGrace = 500 * time.Millisecond

// realSupervisor returns a supervisor on the real sandbox; it skips where
// bwrap is missing, except under CI.
func realSupervisor(t *testing.T) *Supervisor {
	t.Helper()
	s, err := New(Config{Launcher: SandboxLauncher(integrationLauncher.Get(t))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func TestSixtyConcurrentExecutionsDeliverEveryByte(t *testing.T) {
	t.Parallel()
	s := realSupervisor(t)
	// 60 KB each: 10,000 lines of 5 digits and a newline, then exit i%7.
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sp := Spec{Policy: sandbox.Policy{
				Command:   []string{"/bin/sh", "-c", fmt.Sprintf("seq 10000 19999; exit %d", i%7)},
				Workspace: sandboxtest.Dir(t),
			}, Ring: replay.Config{MaxBytes: 1 << 20}}
			info, err := s.Start(t.Context(), "tenant", fmt.Sprint("run-", i), sp)
			if err != nil {
				t.Errorf("start %d: %v", i, err)
				return
			}
			sub, _, _ := s.Attach("tenant", info.ID, 0)
			out, evs := drain(t, sub)
			checkContinuity(t, evs)
			res := mustGet(t, s, "tenant", info.ID).Result
			if len(out) != 60000 || !bytes.HasPrefix(out, []byte("10000\n")) || !bytes.HasSuffix(out, []byte("19999\n")) {
				t.Errorf("run %d: %d bytes", i, len(out))
			}
			if res.Status != StatusExited || res.ExitCode != i%7 || res.Stdout.Original != 60000 {
				t.Errorf("run %d: %+v", i, res)
			}
		}()
	}
	wg.Wait()
}

func TestCancelIgnoringTermEndsWithinGrace(t *testing.T) {
	t.Parallel()
	s := realSupervisor(t)
	marker := fmt.Sprintf("%d.%d", 600+time.Now().Nanosecond()%90, os.Getpid())
	info, err := s.Start(t.Context(), "tenant", "stubborn", Spec{Policy: sandbox.Policy{
		Command:   []string{"/bin/sh", "-c", `trap "" TERM; echo ready; sleep ` + marker},
		Workspace: sandboxtest.Dir(t),
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The trap must be set before the cancel, or TERM alone would end it.
	if ready, err := s.Wait(t.Context(), "tenant", info.ID, 1, 30*time.Second); err != nil || ready.LastSeq < 2 {
		t.Fatalf("no ready line: %+v, %v", ready, err)
	}
	start := time.Now()
	if err := s.Cancel("tenant", info.ID); err != nil {
		t.Fatal(err)
	}
	sub, _, _ := s.Attach("tenant", info.ID, 0)
	drain(t, sub)
	res := mustGet(t, s, "tenant", info.ID).Result
	// The bound is the grace period plus one second; a loaded
	// two-core CI run, starting sixty sandboxes in a parallel test, gets
	// two more seconds for reaping and draining. Without the kill, the
	// sleep would last ten minutes.
	if took := res.Ended.Sub(start); res.Status != StatusCancelled || res.Signal != "SIGKILL" || took > testGrace+3*time.Second {
		t.Errorf("cancel: %+v after %v", res, took)
	}
	if pids := sandboxtest.ProcessesWithArg(marker); len(pids) > 0 {
		t.Errorf("processes left after cancel: %v", pids)
	}
}

func TestRealTimeoutAndInput(t *testing.T) {
	t.Parallel()
	s := realSupervisor(t)
	info, err := s.Start(t.Context(), "tenant", "cat", Spec{
		Policy:  sandbox.Policy{Command: []string{"cat"}, Workspace: sandboxtest.Dir(t)},
		Timeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Input("tenant", info.ID, 0, []byte("hello "))
	s.Input("tenant", info.ID, 0, []byte("hello ")) // a retry: applied once
	s.Input("tenant", info.ID, 6, []byte("world\n"))
	s.CloseStdin("tenant", info.ID)
	sub, _, _ := s.Attach("tenant", info.ID, 0)
	out, _ := drain(t, sub)
	if string(out) != "hello world\n" || mustGet(t, s, "tenant", info.ID).Status != StatusExited {
		t.Errorf("cat: %q, %+v", out, mustGet(t, s, "tenant", info.ID))
	}
	info, _ = s.Start(t.Context(), "tenant", "slow", Spec{
		Policy:  sandbox.Policy{Command: []string{"sleep", "100"}, Workspace: sandboxtest.Dir(t)},
		Timeout: 300 * time.Millisecond,
	})
	sub, _, _ = s.Attach("tenant", info.ID, 0)
	drain(t, sub)
	if got := mustGet(t, s, "tenant", info.ID); got.Status != StatusTimedOut {
		t.Errorf("timeout: %+v", got.Result)
	}
}

// TestRealStartOutOfDescriptorsIsCapacity runs starts on the real sandbox
// in a child process whose descriptors are nearly all taken, freeing one
// more before each start, so each fails at a different step or runs:
// every refusal must be capacity, never internal, invalid_spec or a
// failed execution. The child lowers its own RLIMIT_NOFILE, which would
// starve the tests running beside it here.
func TestRealStartOutOfDescriptorsIsCapacity(t *testing.T) {
	if os.Getenv("TERMGATE_TEST_EMFILE_CHILD") == "1" {
		startsOutOfDescriptors(t)
		return
	}
	t.Parallel()
	realSupervisor(t) // skips where the sandbox is missing, as the child would
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRealStartOutOfDescriptorsIsCapacity$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "TERMGATE_TEST_EMFILE_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("child: %s", bytes.TrimSpace(out))
}

func startsOutOfDescriptors(t *testing.T) {
	s := realSupervisor(t)
	ws := sandboxtest.Dir(t)
	sp := func(tty bool) Spec {
		p := sandbox.Policy{Command: []string{"/bin/true"}, Workspace: ws, Limits: sandbox.Limits{Pids: 64}}
		if tty {
			p.TTY = &sandbox.WindowSize{Rows: 24, Cols: 80}
		}
		return Spec{Policy: p}
	}
	wait := func(id string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		for {
			info, err := s.Wait(ctx, "o", id, 1<<62, 10*time.Second)
			if err != nil {
				t.Fatalf("wait %s: %v", id, err)
			}
			if info.Result != nil {
				return
			}
		}
	}
	if _, err := s.Start(t.Context(), "o", "warm", sp(true)); err != nil {
		t.Fatalf("warm-up start: %v", err)
	}
	wait("warm")

	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	saved := lim
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &saved)
	names, _ := os.ReadDir("/proc/self/fd")
	lim.Cur = uint64(len(names)) + 64
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	var held []*os.File
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()
	for {
		f, err := os.Open("/dev/null")
		if errors.Is(err, syscall.EMFILE) {
			break
		}
		if err != nil || len(held) > 1000 {
			t.Fatalf("filling descriptors: %v after %d", err, len(held))
		}
		held = append(held, f)
	}
	refused, ran := 0, 0
	for k := 0; k < 40 && ran < 2; k++ {
		id := fmt.Sprint("k", k)
		info, err := s.Start(t.Context(), "o", id, sp(k%2 == 1))
		switch {
		case err != nil && !errors.Is(err, ErrCapacity) && !OutOfDescriptors(err):
			t.Errorf("start with %d descriptors freed: %v, want capacity", k, err)
		case err != nil:
			refused++
		case info.Status == StatusFailed:
			t.Errorf("start with %d descriptors freed kept as failed: %s", k, info.Result.Reason)
		default:
			ran++
			wait(id)
		}
		held[len(held)-1].Close()
		held = held[:len(held)-1]
	}
	t.Logf("%d starts refused as capacity, %d ran", refused, ran)
	if refused == 0 {
		t.Error("no start ran out of descriptors")
	}
}
