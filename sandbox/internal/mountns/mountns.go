//go:build linux

// Package mountns forks bwrap from a lean mount namespace.
//
// bwrap copies the mount namespace of its parent and reads the whole
// mount table back after each bind and each remount: a PTY shell's plan
// makes about 28 of them. Every mount of the host that bwrap never uses
// is read again each time: /sys and what lies below it (12 of this
// host's 20 mounts, more on a host with systemd), /dev/shm, /dev/pts,
// every other tenant's workspace. Thread.Fork runs a fork from a fresh
// copy of the host's namespace that keeps only the mounts the child
// needs: those on the way to the host paths it resolves by name, and
// those below them.
//
// The copy is a slave of the host's (nothing done in it reaches the
// host) and belongs to the child alone: bwrap's outer process stays in
// it while its sandbox runs. So it holds no mount it does not need: a
// filesystem the host unmounts meanwhile is not kept busy by it, even on
// a host whose mounts are private, where the unmount would not reach it.
package mountns

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrStuck reports a thread that could not return to the host's mount
// namespace after a fork: a fork from it would not see the host's mounts.
var ErrStuck = errors.New("mountns: the forking thread cannot return to the host's mount namespace")

// Thread forks from lean namespaces on one OS thread. It is not safe for
// concurrent use.
type Thread struct {
	host  int // nsfs descriptor of the host's namespace
	stuck bool
	// The host's mount points, shallowest first, read again only when
	// watch, the host's mountinfo, polls a change. A list that is behind
	// costs nothing but speed: a mount it lacks stays in the copy, and
	// one it still has is gone already.
	watch  int
	points []string
}

// NewThread prepares the calling thread. The thread must be locked to
// its goroutine for the rest of the process's life: its first Fork
// unshares its root and working directory from the other threads
// (CLONE_FS), so the runtime must never hand it to another goroutine.
// A copy needs CAP_SYS_ADMIN; without it, Fork forks from the host's
// namespace and says so.
func NewThread() (*Thread, error) {
	host, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("mountns: open the mount namespace: %w", err)
	}
	watch, err := unix.Open("/proc/thread-self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(host)
		return nil, fmt.Errorf("mountns: %w", err)
	}
	return &Thread{host: host, watch: watch}, nil
}

// Fork runs fork from a fresh lean copy of the host's namespace that
// keeps the mounts needed to resolve keep (absolute, clean host paths:
// the mounts on the way to each, and those below it), then returns to
// the host's. It reports whether fork ran there: where the copy cannot
// be made (no CAP_SYS_ADMIN), fork runs from the host's namespace. A
// thread that could not return makes every later Fork fail with
// ErrStuck.
func (t *Thread) Fork(keep []string, fork func() error) (lean bool, err error) {
	if t.stuck {
		return false, ErrStuck
	}
	if t.points == nil || t.hostChanged() {
		if t.points, err = mountpoints(); err != nil {
			return false, fork()
		}
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return false, fork()
	}
	if prune(t.points, keep) == nil {
		lean, err = true, fork()
	} else {
		// A copy pruned in part is no namespace to fork from.
		lean, err = false, nil
	}
	if back := unix.Setns(t.host, unix.CLONE_NEWNS); back != nil {
		t.stuck = true
		return lean, errors.Join(err, fmt.Errorf("%w: %w", ErrStuck, back))
	}
	if !lean {
		return false, fork()
	}
	return true, err
}

// hostChanged reports whether the host mounted or unmounted anything
// since it last said so.
func (t *Thread) hostChanged() bool {
	fds := []unix.PollFd{{Fd: int32(t.watch), Events: unix.POLLPRI}}
	n, err := unix.Poll(fds, 0)
	return err != nil || (n > 0 && fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0)
}

// Close releases the thread's descriptors.
func (t *Thread) Close() {
	unix.Close(t.watch)
	unix.Close(t.host)
}

// prune makes the calling thread's namespace a slave and detaches every
// mount of points (shallowest first) that Keeps does not keep.
func prune(points, keep []string) error {
	// A copy of a shared mount is its peer: without this, detaching /sys
	// here would detach it on the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("mountns: make the copy a slave: %w", err)
	}
	var gone []string
	for _, p := range points {
		// Below a detached mount: gone with it. One stacked on another
		// at the same point is not, and goes next.
		if Keeps(p, keep) || slices.ContainsFunc(gone, func(g string) bool { return p != g && within(p, g) }) {
			continue
		}
		err := unix.Unmount(p, unix.MNT_DETACH)
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("mountns: detach %s: %w", p, err)
		}
		gone = append(gone, p)
	}
	return nil
}

// Keeps reports whether a lean namespace for keep keeps the mount at
// point: / itself, one on the way to a path of keep, or one below it.
func Keeps(point string, keep []string) bool {
	if point == "/" {
		return true
	}
	for _, k := range keep {
		if within(k, point) || within(point, k) {
			return true
		}
	}
	return false
}

// within reports whether path is dir or lies below it.
func within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

// mountpoints lists the calling thread's mount points, shallowest first:
// detaching a mount takes what is below it along.
func mountpoints() ([]string, error) {
	f, err := os.Open("/proc/thread-self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("mountns: %w", err)
	}
	defer f.Close()
	points, err := parseMountpoints(f)
	slices.SortStableFunc(points, func(a, b string) int { return strings.Count(a, "/") - strings.Count(b, "/") })
	return points, err
}

// parseMountpoints lists the mount points of a mountinfo table, unescaped.
func parseMountpoints(r io.Reader) ([]string, error) {
	var points []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			return nil, fmt.Errorf("mountns: mountinfo line %q", sc.Text())
		}
		points = append(points, unescape(fields[4]))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mountns: read mountinfo: %w", err)
	}
	return points, nil
}

// unescape undoes mountinfo's octal escapes of space, tab, newline and
// backslash (\040 and the like).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
