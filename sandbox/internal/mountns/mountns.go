//go:build linux

// Package mountns gives one locked thread a lean mount namespace to fork
// bwrap from.
//
// bwrap copies the mount namespace of its parent and reads the whole
// mount table back after each bind and each remount: a PTY shell's plan
// makes about 28 of them. Every mount of the host that bwrap never uses
// is read again each time: /sys and what lies below it (13 of this
// host's 20 mounts, more on a host with systemd), what is mounted below
// /proc and below /dev. A Lean namespace is a copy of the host's without
// those, entered only while a fork is made, so bwrap starts from it and
// its table. A path resolves there as on the host unless it lies under
// one of those trees (Pruned), so a caller forks there only when no
// host path the child resolves does.
//
// The copy is a slave of the host's: what the host mounts later, a new
// workspace volume say, reaches it; nothing done in it reaches the host.
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

// prunedTrees are the trees a Lean namespace leaves out: /sys whole,
// and what is mounted below /proc and /dev (never /proc and /dev
// themselves: bwrap binds /dev/null and the device nodes, and reads
// /proc/self).
var prunedTrees = []struct {
	path string
	self bool // the mount at path itself goes too
}{{"/sys", true}, {"/proc", false}, {"/dev", false}}

// Pruned reports whether path (absolute, clean) may resolve differently
// in a Lean namespace than on the host: it lies in one of the trees left
// out.
func Pruned(path string) bool {
	for _, t := range prunedTrees {
		if path == t.path || strings.HasPrefix(path, t.path+"/") {
			return true
		}
	}
	return false
}

// prunes reports whether the mount at mountpoint is left out.
func prunes(mountpoint string) bool {
	for _, t := range prunedTrees {
		if (t.self && mountpoint == t.path) || strings.HasPrefix(mountpoint, t.path+"/") {
			return true
		}
	}
	return false
}

// Lean is a lean mount namespace and the way back to the host's, for
// one thread. It is not safe for concurrent use.
type Lean struct {
	host  int // nsfs descriptor of the host's namespace
	lean  int // and of the lean one; -1 while it must be made again
	watch int // the host's mountinfo, which polls POLLPRI after a change
	stuck bool
	// The mounts of each namespace when the lean one was last made.
	hostMounts, leanMounts int
}

// New makes the calling thread's lean namespace and returns with the
// thread back in the host's. The thread must be locked to its goroutine
// for the rest of the process's life: it no longer shares its root and
// working directory with the others (unshare's CLONE_FS), so the runtime
// must never hand it to another goroutine. It needs CAP_SYS_ADMIN.
func New() (*Lean, error) {
	host, err := openNS()
	if err != nil {
		return nil, err
	}
	watch, err := unix.Open("/proc/thread-self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(host)
		return nil, fmt.Errorf("mountns: %w", err)
	}
	l := &Lean{host: host, lean: -1, watch: watch}
	if err := l.make(); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// make makes the lean namespace again from the host's as it is now.
func (l *Lean) make() error {
	if l.lean >= 0 {
		unix.Close(l.lean)
		l.lean = -1
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("mountns: unshare: %w", err)
	}
	err := l.prune()
	if err == nil {
		l.lean, err = openNS()
	}
	if back := unix.Setns(l.host, unix.CLONE_NEWNS); back != nil {
		l.stuck = true
		return fmt.Errorf("%w: %w", ErrStuck, back)
	}
	return err
}

// prune leaves the host's events coming, and detaches the pruned trees.
func (l *Lean) prune() error {
	// A copy of a shared mount is its peer: without this, detaching /sys
	// here would detach it on the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("mountns: make the copy a slave: %w", err)
	}
	points, err := mountpoints()
	if err != nil {
		return err
	}
	// Shallowest first: detaching a mount takes what is below it along.
	slices.SortFunc(points, func(a, b string) int { return strings.Count(a, "/") - strings.Count(b, "/") })
	for _, p := range points {
		if !prunes(p) {
			continue
		}
		err := unix.Unmount(p, unix.MNT_DETACH)
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("mountns: detach %s: %w", p, err)
		} // else gone already, with one above it, or stacked under another
	}
	left, err := mountpoints()
	if err != nil {
		return err
	}
	if i := slices.IndexFunc(left, prunes); i >= 0 {
		return fmt.Errorf("mountns: %s is still mounted", left[i])
	}
	l.hostMounts, l.leanMounts = len(points), len(left)
	return nil
}

// Do runs fork from the lean namespace and returns to the host's; it
// says whether it did. A copy is no peer of the host's mounts, so a host
// whose mounts are private (no systemd) would not show it a workspace
// mounted since: Do makes the lean namespace again first whenever the
// host's mount table changed. Where that fails, fork runs from the
// host's namespace. A thread that could not return to the host's makes
// Do and Host fail with ErrStuck from then on.
func (l *Lean) Do(fork func() error) (bool, error) {
	if l.stuck {
		return false, ErrStuck
	}
	if l.lean < 0 || l.hostChanged() {
		if err := l.make(); err != nil {
			if l.stuck {
				return false, err
			}
			return false, fork()
		}
	}
	if err := unix.Setns(l.lean, unix.CLONE_NEWNS); err != nil {
		return false, fmt.Errorf("mountns: enter: %w", err)
	}
	err := fork()
	if back := unix.Setns(l.host, unix.CLONE_NEWNS); back != nil {
		l.stuck = true
		return true, errors.Join(err, fmt.Errorf("%w: %w", ErrStuck, back))
	}
	return true, err
}

// hostChanged reports whether the host mounted or unmounted anything
// since it last said so, or since New.
func (l *Lean) hostChanged() bool {
	fds := []unix.PollFd{{Fd: int32(l.watch), Events: unix.POLLPRI}}
	n, err := unix.Poll(fds, 0)
	return err != nil || (n > 0 && fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0)
}

// Host reports whether a fork from the thread sees the host's mounts.
func (l *Lean) Host() error {
	if l.stuck {
		return ErrStuck
	}
	return nil
}

// Mounts says how many mounts the lean namespace and the host's had
// when the lean one was last made.
func (l *Lean) Mounts() (lean, host int) { return l.leanMounts, l.hostMounts }

// Close releases the namespaces' descriptors.
func (l *Lean) Close() {
	for _, fd := range []int{l.lean, l.watch, l.host} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// openNS opens the calling thread's mount namespace (not the process's:
// /proc/self is the thread group leader's).
func openNS() (int, error) {
	fd, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("mountns: open the mount namespace: %w", err)
	}
	return fd, nil
}

// mountpoints lists the calling thread's mount points.
func mountpoints() ([]string, error) {
	f, err := os.Open("/proc/thread-self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("mountns: %w", err)
	}
	defer f.Close()
	return parseMountpoints(f)
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
