//go:build linux

package mountns

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestKeeps(t *testing.T) {
	t.Parallel()
	keep := []string{"/usr", "/srv/ws/mnt/a1", "/dev/null", "/proc/self"}
	for point, want := range map[string]bool{
		"/": true, "/usr": true, "/usr/local": true, "/srv": true, "/srv/ws": true, "/srv/ws/mnt/a1": true,
		"/srv/ws/mnt/a1/cache": true, "/dev": true, "/proc": true,
		"/sys": false, "/sys/fs/cgroup": false, "/dev/shm": false, "/dev/pts": false, "/srv/ws/mnt/b2": false,
		"/srv/ws/mnt/a10": false, "/proc/sys/fs/binfmt_misc": false, "/usrx": false, "/mnt/usb": false,
	} {
		if got := Keeps(point, keep); got != want {
			t.Errorf("Keeps(%q) = %v, want %v", point, got, want)
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

// TestForkKeepsOnlyWhatItResolves: a child forked by Fork sees the mounts
// on the way to the paths it keeps and below them, and no other; the
// thread and the host keep every mount.
func TestForkKeepsOnlyWhatItResolves(t *testing.T) {
	dir := t.TempDir()
	kept, other := filepath.Join(dir, "kept"), filepath.Join(dir, "other")
	for _, d := range []string{kept, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", d, "tmpfs", 0, "size=4k"); err != nil {
			if errors.Is(err, unix.EPERM) && os.Getenv("CI") != "true" {
				t.Skipf("mounts need CAP_SYS_ADMIN: %v", err)
			}
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(d, unix.MNT_DETACH) })
	}
	host := points(t, "/proc/self/mountinfo")
	var child []byte
	var thread []string
	var lean bool
	var forkErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		th, err := NewThread()
		if err != nil {
			forkErr = err
			return
		}
		defer th.Close()
		lean, forkErr = th.Fork([]string{kept + "/sub", "/proc/self", "/dev/null"}, func() (err error) {
			child, err = exec.Command("cat", "/proc/self/mountinfo").Output()
			return err
		})
		thread = points(t, "/proc/thread-self/mountinfo")
	}()
	<-done
	if forkErr != nil || !lean {
		t.Fatalf("Fork: lean %v, %v", lean, forkErr)
	}
	seen, err := parseMountpoints(bytes.NewReader(child))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/", "/proc", "/dev", kept} {
		if !slices.Contains(seen, p) {
			t.Errorf("the child lacks %s: %q", p, seen)
		}
	}
	for _, p := range seen {
		if !Keeps(p, []string{kept + "/sub", "/proc/self", "/dev/null"}) || p == other {
			t.Errorf("the child sees %s", p)
		}
	}
	if !slices.Equal(thread, host) {
		t.Errorf("after Fork the thread sees %q, the host %q", thread, host)
	}
	if after := points(t, "/proc/self/mountinfo"); !slices.Equal(after, host) {
		t.Errorf("the host's mounts changed:\nbefore %q\nafter  %q", host, after)
	}
}

// TestForkLeavesOutWhatTheHostMountedSince: the mount points are read
// again after the host's table changed, so a mount made between two
// forks is left out of the second.
func TestForkLeavesOutWhatTheHostMountedSince(t *testing.T) {
	later := t.TempDir()
	var first, second []byte
	var forkErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		th, err := NewThread()
		if err != nil {
			forkErr = err
			return
		}
		defer th.Close()
		cat := func(out *[]byte) error {
			_, err := th.Fork([]string{"/proc/self", "/dev/null"}, func() (err error) {
				*out, err = exec.Command("cat", "/proc/self/mountinfo").Output()
				return err
			})
			return err
		}
		if forkErr = cat(&first); forkErr != nil {
			return
		}
		if forkErr = unix.Mount("tmpfs", later, "tmpfs", 0, "size=4k"); forkErr != nil {
			return
		}
		defer unix.Unmount(later, unix.MNT_DETACH)
		forkErr = cat(&second)
	}()
	<-done
	if errors.Is(forkErr, unix.EPERM) && os.Getenv("CI") != "true" {
		t.Skipf("mounts need CAP_SYS_ADMIN: %v", forkErr)
	}
	if forkErr != nil {
		t.Fatal(forkErr)
	}
	for _, out := range [][]byte{first, second} {
		seen, err := parseMountpoints(bytes.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(seen, later) {
			t.Errorf("a fork sees %s, mounted after the first fork: %q", later, seen)
		}
	}
}

func points(t *testing.T, mountinfo string) []string {
	t.Helper()
	b, err := os.ReadFile(mountinfo)
	if err != nil {
		t.Fatal(err)
	}
	p, err := parseMountpoints(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// BenchmarkFork is what a lean namespace adds to a fork: the copy of the
// host's table, the detaches and the way back (the fork does nothing).
func BenchmarkFork(b *testing.B) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		th, err := NewThread()
		if err != nil {
			b.Error(err)
			return
		}
		defer th.Close()
		keep := []string{"/usr", "/dev/null", "/proc/self", b.TempDir()}
		for b.Loop() {
			if lean, err := th.Fork(keep, func() error { return nil }); err != nil || !lean {
				b.Errorf("lean %v: %v", lean, err)
				return
			}
		}
	}()
	<-done
}
