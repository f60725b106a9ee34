//go:build linux

// Package mountns forks bwrap from a lean mount namespace.
//
// bwrap copies the mount namespace of its parent and reads the whole
// mount table back after each bind and each remount: a PTY shell's plan
// makes about 28 of them. Every mount of the host that bwrap never uses
// is read again each time: /sys and what lies below it (12 of this
// host's 20 mounts, more on a host with systemd), /dev/shm, /dev/pts,
// every other tenant's workspace. Thread.Fork runs a fork from a lean
// copy of the host's namespace that keeps only the mounts the child
// needs: those on the way to the host paths it resolves by name, and
// those below them.
//
// A copy is a slave of the host's: nothing done in it reaches the host,
// and on a host whose mounts are shared, what the host unmounts leaves it
// too. A copy is made once for each set of mounts kept and serves every
// later fork that keeps the same set: detaching the mounts a copy drops
// waits for an RCU grace period each, which on a busy machine kept the
// one forking thread waiting longer than its forks ran. Copies are made
// again once the host's table changed, and Thread.Release lets them go
// (the keeper's forking thread does when idle), so on a host whose
// mounts are private a copy does not keep a filesystem the host
// unmounted busy for longer than that. bwrap's outer process stays in
// the copy it was forked from while its sandbox runs.
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
	// copies made for earlier forks, the most recently used last
	copies []leanCopy
}

// leanCopy is a lean namespace held for the forks that keep its mounts.
type leanCopy struct {
	kept string // the mount points it keeps, in the order of points
	ns   int    // nsfs descriptor
}

// maxCopies bounds the copies a Thread holds: one a set of mounts kept,
// which differ by tenant only where workspaces are mounts of their own.
const maxCopies = 8

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

// Fork runs fork from a lean copy of the host's namespace that keeps
// the mounts needed to resolve keep (absolute, clean host paths: the
// mounts on the way to each, and those below it), then returns to the
// host's. It reports whether fork ran there: where no copy can be made
// (no CAP_SYS_ADMIN), fork runs from the host's namespace. A thread that
// could not return makes every later Fork fail with ErrStuck.
func (t *Thread) Fork(keep []string, fork func() error) (lean bool, err error) {
	if t.stuck {
		return false, ErrStuck
	}
	if t.points == nil || t.hostChanged() {
		t.Release()
		if t.points, err = mountpoints(); err != nil {
			return false, fork()
		}
	}
	ns, err := t.copyFor(keep)
	if err != nil {
		if errors.Is(err, ErrStuck) {
			return false, err
		}
		return false, fork()
	}
	if err := unix.Setns(ns, unix.CLONE_NEWNS); err != nil {
		t.Release() // made again by the next Fork
		return false, fork()
	}
	err = fork()
	if back := t.back(); back != nil {
		return true, errors.Join(err, back)
	}
	return true, err
}

// copyFor returns the copy that keeps what keep needs, made now if the
// thread holds none.
func (t *Thread) copyFor(keep []string) (int, error) {
	var kept strings.Builder
	for _, p := range t.points {
		if Keeps(p, keep) {
			kept.WriteString(p)
			kept.WriteByte(0)
		}
	}
	for i, c := range t.copies {
		if c.kept == kept.String() {
			copy(t.copies[i:], t.copies[i+1:]) // the most recently used goes last
			t.copies[len(t.copies)-1] = c
			return c.ns, nil
		}
	}
	ns, err := t.makeCopy(keep)
	if err != nil {
		return -1, err
	}
	if len(t.copies) == maxCopies {
		unix.Close(t.copies[0].ns)
		t.copies = slices.Delete(t.copies, 0, 1)
	}
	t.copies = append(t.copies, leanCopy{kept: kept.String(), ns: ns})
	return ns, nil
}

// makeCopy makes a lean copy for keep and returns to the host's
// namespace.
func (t *Thread) makeCopy(keep []string) (int, error) {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return -1, fmt.Errorf("mountns: copy the namespace: %w", err)
	}
	ns := -1
	// A copy pruned in part is no namespace to fork from.
	err := prune(t.points, keep)
	if err == nil {
		if ns, err = unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			err = fmt.Errorf("mountns: open the copy: %w", err)
		}
	}
	if back := t.back(); back != nil {
		if ns >= 0 {
			unix.Close(ns)
		}
		return -1, back
	}
	return ns, err
}

// back returns the thread to the host's namespace, or marks it stuck.
func (t *Thread) back() error {
	if err := unix.Setns(t.host, unix.CLONE_NEWNS); err != nil {
		t.stuck = true
		return fmt.Errorf("%w: %w", ErrStuck, err)
	}
	return nil
}

// Copies reports how many lean copies the thread holds.
func (t *Thread) Copies() int { return len(t.copies) }

// Release closes the copies the thread holds. Children forked from them
// keep theirs; the next Fork makes new ones.
func (t *Thread) Release() {
	for _, c := range t.copies {
		unix.Close(c.ns)
	}
	t.copies = nil
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
	t.Release()
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
