//go:build linux

package fdio

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
	w := NewWaiter()
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
			if !w.WhenExited(cmd.Process.Pid, func() {
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

// TestWaiterIgnoresAnEventOfAnEarlierRegistration: an event read from the
// epoll for a descriptor that was then removed, closed, and its number
// given to another descriptor added meanwhile, does not call the new
// one's function; the new registration's own event does.
func TestWaiterIgnoresAnEventOfAnEarlierRegistration(t *testing.T) {
	w := NewWaiter()
	var other, reused [2]int
	if err := unix.Pipe2(other[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	if err := unix.Pipe2(reused[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, fd := range append(other[:], reused[:]...) {
			unix.Close(fd)
		}
	}()
	fd := reused[0]
	called := make(chan string, 2)
	if !w.WhenReadable(other[0], func() { called <- "other" }) || !w.WhenReadable(fd, func() { called <- "first" }) {
		t.Fatal("the waiter took no descriptor")
	}
	w.mu.Lock()
	stale := fdEvent{fd: int32(fd), n: w.waiting[int32(fd)].n}
	w.mu.Unlock()
	if !w.StopWaiting(fd) || !w.WhenReadable(fd, func() { called <- "second" }) {
		t.Fatal("the descriptor was not taken back, or not again")
	}
	w.mu.Lock()
	fresh := fdEvent{fd: int32(fd), n: w.waiting[int32(fd)].n}
	ep := w.ep
	w.mu.Unlock()
	w.take(ep, []fdEvent{stale})
	select {
	case who := <-called:
		t.Fatalf("the earlier registration's event called %s", who)
	case <-time.After(100 * time.Millisecond):
	}
	w.take(ep, []fdEvent{fresh})
	select {
	case who := <-called:
		if who != "second" {
			t.Fatalf("the registration's own event called %s", who)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the registration's own event called nothing")
	}
	w.StopWaiting(other[0])
}
