//go:build linux

package sandbox

import (
	"os/exec"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestExitWaiterReportsEveryExitOnce: children that exit in any order,
// one that exited before it was watched included, are each reported
// once, and the waiter lets go of its epoll descriptor (and its
// goroutine) once it waits for none; the next child starts it again.
func TestExitWaiterReportsEveryExitOnce(t *testing.T) {
	w := &fdWaiter{waiting: map[int32]func(){}}
	for round := range 2 {
		const n = 40
		cmds := make([]*exec.Cmd, n)
		for i := range n {
			// Staggered exits, the first at once: it may be gone before watch.
			cmds[i] = exec.Command("/bin/sh", "-c", "sleep 0."+strconv.Itoa(i%10))
			if i == 0 {
				cmds[i] = exec.Command("/bin/true")
			}
			if err := cmds[i].Start(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(20 * time.Millisecond) // the first has exited by now
		reported := make(chan int, 2*n)
		for i, cmd := range cmds {
			if !watchExit(w, cmd.Process.Pid, func() {
				if !exitedNow(cmd.Process.Pid) {
					i = -1 - i // called before the child exited
				}
				cmd.Wait()
				reported <- i
			}) {
				t.Fatalf("round %d: child %d not watched: no pidfd here?", round, i)
			}
		}
		seen := make([]bool, n)
		timeout := time.After(30 * time.Second)
		for range n {
			select {
			case i := <-reported:
				if i < 0 {
					t.Fatalf("round %d: child %d reported while it ran", round, -1-i)
				}
				if seen[i] {
					t.Fatalf("round %d: child %d reported twice", round, i)
				}
				seen[i] = true
			case <-timeout:
				t.Fatalf("round %d: exits reported: %v", round, seen)
			}
		}
		w.mu.Lock()
		ep, left := w.ep, len(w.waiting)
		w.mu.Unlock()
		if ep != nil || left != 0 {
			t.Fatalf("round %d: the waiter still holds its epoll descriptor (%v) or %d children", round, ep, left)
		}
	}
}

// exitedNow reports whether the child pid has exited, without reaping it.
func exitedNow(pid int) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err == nil && info.Signo != 0
}
