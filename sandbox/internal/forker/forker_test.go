//go:build linux

package forker

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/termgate/termgate/sandbox/internal/cgroup/v1thread"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestMain checks that no forker outlived the tests but those kept for
// good.
func TestMain(m *testing.M) { sandboxtest.Main(m, sandboxtest.Ignore(sandboxtest.Forker)) }

// noMover makes a forker enter nothing.
func noMover() (v1thread.Mover, error) { return nil, errors.New("none") }

// TestChildOutlivesIdleForker: a child forked with Pdeathsig on the
// forker's thread lives on once the forker went idle and handed its
// thread back, as the thread never exits; every job of one run finds the
// same thread, never the process's main one.
func TestChildOutlivesIdleForker(t *testing.T) {
	t.Parallel()
	f := New(Config{Mover: noMover, Idle: 10 * time.Millisecond})
	var pid, tid, tid2 int
	var err error
	f.Do(func(*Thread) {
		tid = unix.Gettid()
		pid, err = syscall.ForkExec("/bin/sleep", []string{"sleep", "60"}, &syscall.ProcAttr{
			Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, 0, nil)
	}()
	f.Do(func(*Thread) { tid2 = unix.Gettid() })
	if tid != tid2 || tid == unix.Getpid() {
		t.Errorf("jobs ran on threads %d and %d (the main one is %d), want one other than main", tid, tid2, unix.Getpid())
	}
	if !sandboxtest.Eventually(t, 5*time.Second, func() bool { return !f.Running() }) {
		t.Fatal("the forker still runs 5 s after its last job")
	}
	time.Sleep(50 * time.Millisecond) // a Pdeathsig would have come by now
	var ws unix.WaitStatus
	if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); got != 0 || err != nil {
		t.Errorf("the child ended with the idle forker: wait4 %d %v, status %v", got, err, ws)
	}
}

// TestSetupKeepsThread: a forker with Setup runs it once, first, on its
// thread, and keeps that thread for good.
func TestSetupKeepsThread(t *testing.T) {
	t.Parallel()
	setups, setupTid := 0, 0
	f := New(Config{Mover: noMover, Idle: 10 * time.Millisecond, Setup: func() { setups++; setupTid = unix.Gettid() }})
	var tid int
	f.Do(func(*Thread) { tid = unix.Gettid() })
	time.Sleep(100 * time.Millisecond)
	if !f.Running() {
		t.Error("a forker with Setup ended once idle")
	}
	var tid2 int
	f.Do(func(*Thread) { tid2 = unix.Gettid() })
	if setups != 1 || setupTid != tid || tid2 != tid {
		t.Errorf("Setup ran %d times on thread %d; jobs on %d and %d", setups, setupTid, tid, tid2)
	}
}

// TestInNetNS: a child forked in InNetNS is born in the namespace given,
// and the thread is back in its own afterwards; -1 forks where the
// thread is.
func TestInNetNS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("entering a network namespace needs CAP_SYS_ADMIN")
	}
	target := make(chan int, 1)
	go lockedOffMain(func() { // never unlocked: the thread ends in the new namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			target <- -1
			return
		}
		fd, _ := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		target <- fd
	})
	ns := <-target
	if ns < 0 {
		t.Fatal("no network namespace")
	}
	defer unix.Close(ns)
	f := New(Config{Idle: time.Millisecond})
	inode := func(path string) uint64 {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	var nsSt unix.Stat_t
	unix.Fstat(ns, &nsSt)
	for _, c := range []struct {
		fd   int
		want uint64
	}{{ns, nsSt.Ino}, {-1, 0}} {
		var child *exec.Cmd
		var own, after uint64
		f.Do(func(th *Thread) {
			own = inode("/proc/thread-self/ns/net")
			err := th.InNetNS(c.fd, func() error {
				child = exec.Command("sleep", "10")
				return child.Start()
			})
			if err != nil {
				t.Error(err)
			}
			after = inode("/proc/thread-self/ns/net")
		})
		if child == nil || child.Process == nil {
			t.Fatal("no child")
		}
		got := inode(fmt.Sprintf("/proc/%d/ns/net", child.Process.Pid))
		if c.want == 0 {
			c.want = own
		}
		child.Process.Kill()
		child.Wait()
		if got != c.want || after != own {
			t.Errorf("netns %d: the child's namespace %d, want %d; the thread's %d before, %d after", c.fd, got, c.want, own, after)
		}
	}
}
