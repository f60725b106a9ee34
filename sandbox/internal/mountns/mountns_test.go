//go:build linux

package mountns

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestPruned(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]bool{
		"/sys": true, "/sys/fs/cgroup": true, "/proc": true, "/proc/sys/fs/binfmt_misc": true,
		"/dev": true, "/dev/shm/ws": true, "/": false, "/system": false, "/procedures": false,
		"/devices/x": false, "/var/lib/termgate": false, "/tmp/ws": false,
	} {
		if got := Pruned(path); got != want {
			t.Errorf("Pruned(%q) = %v, want %v", path, got, want)
		}
	}
}

func TestPrunesMountsBelowProcAndDevNotThemselves(t *testing.T) {
	t.Parallel()
	for point, want := range map[string]bool{
		"/sys": true, "/sys/fs/cgroup/memory": true, "/proc": false, "/proc/sys/fs/binfmt_misc": true,
		"/dev": false, "/dev/pts": true, "/dev/shm": true, "/": false, "/usr": false, "/system": false,
	} {
		if got := prunes(point); got != want {
			t.Errorf("prunes(%q) = %v, want %v", point, got, want)
		}
	}
}

func TestUnescape(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`/mnt/a\040b`: "/mnt/a b", `/x\011y\012z`: "/x\ty\nz", `/back\134slash`: `/back\slash`,
		`/plain`: "/plain", `/short\04`: `/short\04`, `/not\089`: `/not\089`,
	} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// onLockedThread runs f on a goroutine locked to a thread that ends with
// it: the namespaces f makes die with the thread.
func onLockedThread(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		f()
	}()
	<-done
}

// TestLeanForksWithoutThePrunedTrees: a child forked in Do sees no mount
// below /sys, /proc or /dev, yet / and /proc; the thread and the host
// keep every mount.
func TestLeanForksWithoutThePrunedTrees(t *testing.T) {
	before, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	hostPoints := pointsOf(t, before)
	if !slices.ContainsFunc(hostPoints, prunes) {
		t.Skip("the host mounts nothing a lean namespace leaves out")
	}
	var child []byte
	var thread []string
	var lean, host int
	var newErr, doErr error
	onLockedThread(func() {
		l, err := New()
		if err != nil {
			newErr = err
			return
		}
		defer l.Close()
		lean, host = l.Mounts()
		var leaned bool
		leaned, doErr = l.Do(func() error {
			child, err = exec.Command("cat", "/proc/self/mountinfo").Output()
			return err
		})
		if doErr == nil && !leaned {
			doErr = errors.New("Do forked from the host's namespace")
		}
		b, err := os.ReadFile("/proc/thread-self/mountinfo")
		if err == nil {
			thread = pointsOf(t, b)
		}
	})
	if errors.Is(newErr, unix.EPERM) && os.Getenv("CI") != "true" {
		t.Skipf("a mount namespace needs CAP_SYS_ADMIN: %v", newErr)
	}
	if newErr != nil || doErr != nil {
		t.Fatalf("New: %v; Do: %v", newErr, doErr)
	}
	points := pointsOf(t, child)
	for _, p := range points {
		if prunes(p) {
			t.Errorf("the child sees %s", p)
		}
	}
	for _, p := range []string{"/", "/proc", "/dev"} {
		if !slices.Contains(points, p) {
			t.Errorf("the child lacks %s: %q", p, points)
		}
	}
	if lean != len(points) || host != len(hostPoints) || lean >= host {
		t.Errorf("Mounts() = %d, %d; the child saw %d, the host has %d", lean, host, len(points), len(hostPoints))
	}
	if !slices.Equal(thread, hostPoints) {
		t.Errorf("after Do the thread sees %q, the host %q", thread, hostPoints)
	}
	after, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pointsOf(t, after), hostPoints) {
		t.Errorf("the host's mounts changed:\nbefore %q\nafter  %q", hostPoints, pointsOf(t, after))
	}
}

func pointsOf(t *testing.T, mountinfo []byte) []string {
	t.Helper()
	points, err := parseMountpoints(bytes.NewReader(mountinfo))
	if err != nil {
		t.Fatal(err)
	}
	return points
}

// TestLeanSeesWhatTheHostMountsLater: a mount the host makes after New is
// in the lean namespace of the next Do, even where the host's mounts are
// private and nothing propagates; and one it removes is gone.
func TestLeanSeesWhatTheHostMountsLater(t *testing.T) {
	dir := t.TempDir()
	var seen, gone []string
	var newErr, doErr error
	onLockedThread(func() {
		l, err := New()
		if err != nil {
			newErr = err
			return
		}
		defer l.Close()
		cat := func() []string {
			var out []byte
			_, err := l.Do(func() (err error) {
				out, err = exec.Command("cat", "/proc/self/mountinfo").Output()
				return err
			})
			doErr = errors.Join(doErr, err)
			return pointsOf(t, out)
		}
		cat() // with the namespace as New made it
		if doErr = unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4k"); doErr != nil {
			return
		}
		seen = cat()
		doErr = errors.Join(doErr, unix.Unmount(dir, 0))
		gone = cat()
	})
	if errors.Is(newErr, unix.EPERM) && os.Getenv("CI") != "true" {
		t.Skipf("a mount namespace needs CAP_SYS_ADMIN: %v", newErr)
	}
	if newErr != nil || doErr != nil {
		t.Fatalf("New: %v; mount or Do: %v", newErr, doErr)
	}
	if !slices.Contains(seen, dir) {
		t.Errorf("a tmpfs mounted on %s after New: the lean namespace has %q", dir, seen)
	}
	if slices.Contains(gone, dir) {
		t.Errorf("the tmpfs on %s was unmounted: the lean namespace still has it", dir)
	}
}
