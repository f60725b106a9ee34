//go:build linux

package mountns

import (
	"bytes"
	"errors"
	"fmt"
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

// onThread runs f with a Thread of a fresh OS thread, locked for good
// and ending with it, and returns f's error. Where it may, the thread
// first moves to a private copy of the host's mount namespace, which is
// then the Thread's host: other processes (other packages' tests, run
// at the same time) mount and unmount on the real host, and a Thread
// drops its copies at each change it sees.
func onThread(f func(th *Thread) error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err == nil {
				if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
					return err
				}
			} else if !errors.Is(err, unix.EPERM) {
				return err
			}
			th, err := NewThread()
			if err != nil {
				return err
			}
			defer th.Close()
			return f(th)
		}()
	}()
	return <-errc
}

// nsOf is the inode of the calling thread's mount namespace.
func nsOf() (uint64, error) {
	var st unix.Stat_t
	err := unix.Stat("/proc/thread-self/ns/mnt", &st)
	return st.Ino, err
}

// forkCat forks cat /proc/self/mountinfo through th, and returns the
// mount points the child saw and whether Fork said it was lean.
func forkCat(th *Thread, keep []string) (seen []string, lean bool, err error) {
	var out []byte
	lean, err = th.Fork(keep, func() (err error) {
		out, err = exec.Command("cat", "/proc/self/mountinfo").Output()
		return err
	})
	if err != nil {
		return nil, lean, err
	}
	seen, err = parseMountpoints(bytes.NewReader(out))
	return seen, lean, err
}

// tmpfsAt mounts a small tmpfs on dir, a new directory, until the test
// ends.
func tmpfsAt(t *testing.T, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4k"); err != nil {
		skipWithoutMounts(t, err)
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
}

// skipWithoutMounts skips a test whose mount failed for want of
// CAP_SYS_ADMIN, except in CI.
func skipWithoutMounts(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, unix.EPERM) && os.Getenv("CI") != "true" {
		t.Skipf("mounts need CAP_SYS_ADMIN: %v", err)
	}
}

// TestForkKeepsOnlyWhatItResolves: a child forked by Fork sees the mounts
// on the way to the paths it keeps and below them, and no other; the
// thread and the host keep every mount.
func TestForkKeepsOnlyWhatItResolves(t *testing.T) {
	dir := t.TempDir()
	kept, other := filepath.Join(dir, "kept"), filepath.Join(dir, "other")
	tmpfsAt(t, kept)
	tmpfsAt(t, other)
	keep := []string{kept + "/sub", "/proc/self", "/dev/null"}
	var host, seen, after []string
	var lean bool
	err := onThread(func(th *Thread) (err error) {
		if host, err = points("/proc/thread-self/mountinfo"); err != nil {
			return err
		}
		if seen, lean, err = forkCat(th, keep); err != nil {
			return err
		}
		after, err = points("/proc/thread-self/mountinfo")
		return err
	})
	if err != nil || !lean {
		t.Fatalf("Fork: lean %v, %v", lean, err)
	}
	for _, p := range []string{"/", "/proc", "/dev", kept} {
		if !slices.Contains(seen, p) {
			t.Errorf("the child lacks %s: %q", p, seen)
		}
	}
	for _, p := range seen {
		if !Keeps(p, keep) || p == other {
			t.Errorf("the child sees %s", p)
		}
	}
	if !slices.Equal(after, host) {
		t.Errorf("the host's mounts changed:\nbefore %q\nafter  %q", host, after)
	}
}

// TestForkLeavesOutWhatTheHostMountedSince: the mount points are read
// again after the host's table changed, so a mount made between two
// forks is left out of the second.
func TestForkLeavesOutWhatTheHostMountedSince(t *testing.T) {
	later := t.TempDir()
	keep := []string{"/proc/self", "/dev/null"}
	var first, second []string
	err := onThread(func(th *Thread) (err error) {
		if first, _, err = forkCat(th, keep); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", later, "tmpfs", 0, "size=4k"); err != nil {
			return err
		}
		defer unix.Unmount(later, unix.MNT_DETACH)
		second, _, err = forkCat(th, keep)
		return err
	})
	skipWithoutMounts(t, err)
	if err != nil {
		t.Fatal(err)
	}
	for _, seen := range [][]string{first, second} {
		if slices.Contains(seen, later) {
			t.Errorf("a fork sees %s, mounted after the first fork: %q", later, seen)
		}
	}
}

// TestForkThatCannotReturnIsStuck: a thread whose way back to the host's
// namespace fails (here its handle names a network namespace, which
// setns refuses as a mount namespace) reports ErrStuck, with the fork it
// ran, and then forks nothing: a child would see the lean copy's mounts.
func TestForkThatCannotReturnIsStuck(t *testing.T) {
	var first, second, third error
	var lean bool
	forks := 0
	fork := func() error { forks++; return nil }
	keep := []string{"/proc/self", "/dev/null"}
	err := onThread(func(th *Thread) error {
		if _, first = th.Fork(keep, fork); first != nil {
			return first
		}
		notMount, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		unix.Close(th.host)
		th.host = notMount // closed by th.Close
		lean, second = th.Fork(keep, fork)
		_, third = th.Fork(keep, fork)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !lean && os.Getenv("CI") != "true" {
		t.Skip("no lean copy was made (mounts need CAP_SYS_ADMIN)")
	}
	if !lean || !errors.Is(second, ErrStuck) {
		t.Errorf("second Fork: lean %v, err %v; want lean and ErrStuck", lean, second)
	}
	if !errors.Is(third, ErrStuck) {
		t.Errorf("third Fork: %v, want ErrStuck", third)
	}
	if forks != 2 {
		t.Errorf("fork ran %d times, want twice: a stuck thread forks nothing", forks)
	}
}

// TestForkReusesItsCopy: forks that keep the same mounts share one
// copy; one that keeps another mount, a fork after the host's table
// changed and one after Release each get a new copy; a thread holds at
// most maxCopies.
func TestForkReusesItsCopy(t *testing.T) {
	dir := t.TempDir()
	var mounts []string
	for i := range maxCopies + 2 {
		d := filepath.Join(dir, fmt.Sprint(i))
		tmpfsAt(t, d)
		mounts = append(mounts, d)
	}
	base := []string{"/proc/self", "/dev/null"}
	keeping := func(d string) []string { return append(slices.Clip(base), d+"/sub") }
	later := t.TempDir()
	var ns []uint64
	var held int
	var host uint64
	err := onThread(func(th *Thread) (err error) {
		if host, err = nsOf(); err != nil {
			return err
		}
		for _, keep := range [][]string{
			base, append(slices.Clip(base), "/proc/self/status"), // the same mounts kept: one copy
			keeping(mounts[0]), // another mount kept: another copy
		} {
			n, err := forkNS(t, th, keep)
			if err != nil {
				return err
			}
			ns = append(ns, n)
		}
		if err := unix.Mount("tmpfs", later, "tmpfs", 0, "size=4k"); err != nil {
			return err
		}
		defer unix.Unmount(later, unix.MNT_DETACH)
		n, err := forkNS(t, th, base) // the host changed: a new copy
		if err != nil {
			return err
		}
		th.Release()
		m, err := forkNS(t, th, base) // released: a new copy
		if err != nil {
			return err
		}
		ns = append(ns, n, m)
		for _, d := range mounts {
			if _, err := forkNS(t, th, keeping(d)); err != nil {
				return err
			}
		}
		held = len(th.copies)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ns[0] != ns[1] || ns[0] == host {
		t.Errorf("two forks keeping the same mounts ran in %d and %d (the host's %d), want one copy", ns[0], ns[1], host)
	}
	for i, why := range map[int]string{2: "keeping another mount", 3: "after the host's table changed", 4: "after Release"} {
		if slices.Contains(ns[:i], ns[i]) || ns[i] == host {
			t.Errorf("a fork %s ran in %d, an earlier fork's or the host's namespace: %d", why, ns[i], ns)
		}
	}
	if held != maxCopies {
		t.Errorf("the thread holds %d copies, want %d", held, maxCopies)
	}
}

// forkNS runs a fork through th and returns the namespace it ran in,
// held open until the test ends so that its number is not reused.
func forkNS(t *testing.T, th *Thread, keep []string) (uint64, error) {
	var st unix.Stat_t
	lean, err := th.Fork(keep, func() error {
		f, err := os.Open("/proc/thread-self/ns/mnt")
		if err != nil {
			return err
		}
		t.Cleanup(func() { f.Close() })
		return unix.Fstat(int(f.Fd()), &st)
	})
	if err == nil && !lean {
		err = errors.New("the fork was not lean")
	}
	return st.Ino, err
}

func points(mountinfo string) ([]string, error) {
	b, err := os.ReadFile(mountinfo)
	if err != nil {
		return nil, err
	}
	return parseMountpoints(bytes.NewReader(b))
}

// BenchmarkFork is what a lean namespace adds to a fork (which does
// nothing here): the way into the copy and back, with the copy reused,
// or also made for each fork (released after it), as before copies were
// kept: the copy of the host's table and its detaches.
func BenchmarkFork(b *testing.B) {
	keep := []string{"/usr", "/dev/null", "/proc/self", b.TempDir()}
	for _, release := range []bool{false, true} {
		b.Run(map[bool]string{false: "reused", true: "made"}[release], func(b *testing.B) {
			err := onThread(func(th *Thread) error {
				fork := func() error {
					if lean, err := th.Fork(keep, func() error { return nil }); err != nil || !lean {
						return fmt.Errorf("lean %v: %w", lean, err)
					}
					if release {
						th.Release()
					}
					return nil
				}
				if err := fork(); err != nil { // reused: made here, outside the timed loop
					return err
				}
				for b.Loop() {
					if err := fork(); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}
