//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrUnavailable is wrapped when the host cannot run a sandbox at all.
var ErrUnavailable = errors.New("sandbox: unavailable on this host")

// ErrIdentity is wrapped when the sandbox identity is unusable.
var ErrIdentity = errors.New("sandbox: unusable sandbox identity")

// Default host identity for the sandbox when termgate runs as root: an id
// no account and no subordinate-id range uses by default, and not 65534
// (nobody), which may have the reserved disk blocks.
const (
	DefaultUID = 2000000
	DefaultGID = 2000000
)

// findBwrap resolves bwrap to an absolute path and reads its version.
func findBwrap(name string) (path, version string, err error) {
	if name == "" {
		name = "bwrap"
	}
	path, err = exec.LookPath(name)
	if err != nil {
		return "", "", fmt.Errorf("%w: bubblewrap (bwrap) not found: install it (Debian: apt-get install bubblewrap): %w", ErrUnavailable, err)
	}
	if path, err = filepath.Abs(path); err != nil {
		return "", "", fmt.Errorf("%w: resolve bwrap: %w", ErrUnavailable, err)
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return "", "", fmt.Errorf("%w: run %s --version: %w", ErrUnavailable, path, err)
	}
	return path, strings.TrimSpace(string(out)), nil
}

// detectLayout reads the host paths the plan binds or recreates.
func detectLayout() (hostLayout, error) {
	h := hostLayout{links: map[string]string{}, etc: map[string]etcEntry{}, hostNet: map[string][]byte{}, procMasked: map[string]bool{}}
	if fi, err := os.Stat("/usr"); err != nil || !fi.IsDir() {
		return h, fmt.Errorf("%w: /usr is not a directory", ErrUnavailable)
	}
	for _, top := range systemTops {
		if err := h.addTop(top); err != nil {
			return h, err
		}
	}
	for _, e := range etcEntries {
		if err := h.addEtc(e); err != nil {
			return h, err
		}
	}
	for _, e := range hostNetEntries {
		if data, err := os.ReadFile(e); err == nil {
			h.hostNet[e] = data
		}
	}
	// A private procfs has the same entries as the host's: what is absent
	// here needs no mask, and bwrap could not mount one on it.
	for _, m := range procMasks {
		if fi, err := os.Lstat(m); err == nil {
			h.procMasked[m] = fi.IsDir()
		}
	}
	return h, nil
}

// prepareInit returns the host path of the program the sandbox runs as its
// init: this very binary, linked, or else copied, into a fresh root-owned
// directory, which the returned cleanup removes. Never the binary's own
// path: a bind mount's source shows in the sandbox's
// /proc/self/mountinfo, which would tell tenants where termgate is
// installed (the host's layout); the directory's name tells nothing. It
// is also a directory the sandbox identity can search, as bwrap resolves
// a bind source as that identity (the binary may sit in a build cache or
// a private home). The directory is locked while the launcher lives, so
// copies that killed instances left are told apart and removed first.
func (id identity) prepareInit(log *slog.Logger) (string, func(), error) {
	removeStaleInits(log)
	// Made under a name the sweep skips, and named for it only once locked.
	fresh, err := os.MkdirTemp("", "."+initDirPrefix)
	if err != nil {
		return "", nil, fmt.Errorf("%w: sandbox init: %w", ErrUnavailable, err)
	}
	lock, err := lockInitDir(fresh)
	dir := filepath.Join(filepath.Dir(fresh), filepath.Base(fresh)[1:])
	if err == nil {
		err = os.Rename(fresh, dir)
	}
	if err != nil {
		os.RemoveAll(fresh)
		if lock != nil {
			lock.Close()
		}
		return "", nil, fmt.Errorf("%w: sandbox init: %w", ErrUnavailable, err)
	}
	cleanup := func() {
		os.RemoveAll(dir)
		lock.Close()
	}
	path := filepath.Join(dir, "init")
	if err := errors.Join(os.Chmod(dir, 0o711), copyExecutable(path)); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("%w: sandbox init: %w", ErrUnavailable, err)
	}
	return path, cleanup, nil
}

// initDirPrefix names the directories holding a copy of the init.
const initDirPrefix = "termgate-init-"

// lockInitDir takes a shared lock on dir for as long as the returned file
// is open; the kernel drops it when the process dies, however it dies.
func lockInitDir(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return f, nil
}

// removeStaleInits removes the copies of the init whose launcher is gone:
// those whose directory nobody holds locked.
func removeStaleInits(log *slog.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), initDirPrefix+"*"))
	for _, dir := range dirs {
		f, err := os.Open(dir)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			if err := os.RemoveAll(dir); err == nil {
				log.Info("removed a copy of the sandbox init a previous instance left", "dir", dir)
			}
		}
		f.Close()
	}
}

// copyExecutable puts the running binary at dst, mode 0555: a hard link
// when the file system allows and the binary is readable by all, a copy
// otherwise.
func copyExecutable(dst string) error {
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer src.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err == nil && st.Mode&0o005 == 0o005 && st.Uid == 0 {
		if unix.Linkat(unix.AT_FDCWD, "/proc/self/exe", unix.AT_FDCWD, dst, unix.AT_SYMLINK_FOLLOW) == nil {
			return nil
		}
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o555)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, src)
	return errors.Join(err, out.Close())
}

func (h *hostLayout) addTop(top string) error {
	fi, err := os.Lstat(top)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("%w: inspect %s: %w", ErrUnavailable, top, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(top)
		if err != nil {
			return fmt.Errorf("%w: read link %s: %w", ErrUnavailable, top, err)
		}
		h.links[top] = target
	case fi.IsDir():
		h.dirs = append(h.dirs, top)
	}
	return nil
}

func (h *hostLayout) addEtc(e string) error {
	fi, err := os.Lstat(e)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("%w: inspect %s: %w", ErrUnavailable, e, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(e)
		if err != nil {
			return fmt.Errorf("%w: read link %s: %w", ErrUnavailable, e, err)
		}
		h.etc[e] = etcEntry{link: target}
	default:
		h.etc[e] = etcEntry{copy: copiable(fi)}
	}
	return nil
}

// copiable says whether an /etc entry is shown as a copy (see etcEntry):
// only a regular file everyone may read, so the copy shows nothing a bind
// as the sandbox identity would not.
func copiable(fi fs.FileInfo) bool {
	return fi.Mode().IsRegular() && fi.Mode().Perm()&0o004 != 0 && fi.Size() <= maxCopiedEtc
}

// openNoFollow opens an absolute host path without following any symlink
// in any component, the last included, so a sandbox that swapped a
// directory for a link to / cannot get the host mounted into the next
// sandbox. Only directories and regular files are accepted.
func openNoFollow(path string, flags int) (*os.File, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &how)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("open %s: a path component is a symbolic link", path)
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFDIR && t != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("open %s: not a directory or regular file", path)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// checkHostPath checks the directories above a bind source. The sandbox
// identity must be able to search them, because bwrap resolves the source
// as that identity (and would only say "Permission denied" about a
// /proc/self/fd path). And none may belong to that identity: bwrap
// resolves the path again by name, so a directory a sandbox can write
// could be swapped for a link between termgate's check and the mount.
func (id identity) checkHostPath(path string) error {
	if !id.switchTo {
		return nil
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			return fmt.Errorf("inspect %s: %w", dir, err)
		}
		if st.Uid == id.uid || st.Uid == id.shared || id.tenants.Contains(st.Uid) {
			return fmt.Errorf("%s lies in %s, which a sandbox identity owns: bind sources must be paths no sandbox can write", path, dir)
		}
		if !id.canSearch(st) {
			return fmt.Errorf("%s (mode %04o) is not searchable by the sandbox identity %d:%d: give its directories at least mode 0711", dir, st.Mode&0o7777, id.uid, id.gid)
		}
		if dir == "/" {
			return nil
		}
	}
}

func (id identity) canSearch(st unix.Stat_t) bool {
	switch {
	case st.Uid == id.uid:
		return st.Mode&0o100 != 0
	case st.Gid == id.gid:
		return st.Mode&0o010 != 0
	}
	return st.Mode&0o001 != 0
}

// identity is the host uid and gid bwrap runs as.
type identity struct {
	uid, gid uint32
	switchTo bool // termgate is root and must drop to uid/gid
	// shared and tenants are every other id a sandbox may run as: no bind
	// source may lie in a directory one of them owns.
	shared  uint32
	tenants UIDRange
}

// UIDRange is a range of host ids: First, First+1, ..., First+Count-1.
type UIDRange struct {
	First, Count uint32
}

// DefaultTenantUIDs is where tenant identities come from by default: above
// DefaultUID, clear of the ids accounts and subordinate ranges use.
var DefaultTenantUIDs = UIDRange{First: 3000000, Count: 100000}

// Contains reports whether id lies in the range.
func (r UIDRange) Contains(id uint32) bool {
	return id >= r.First && id-r.First < r.Count
}

// tenantRange checks the tenant range (DefaultTenantUIDs when zero): no
// root, no nobody, not the launcher's own identity, no wrap-around.
func tenantRange(r UIDRange, shared identity) (UIDRange, error) {
	if r == (UIDRange{}) {
		r = DefaultTenantUIDs
	}
	switch {
	case r.Count == 0 || r.First == 0 || uint64(r.First)+uint64(r.Count) > 1<<32-1:
		return r, fmt.Errorf("%w: tenant id range %d+%d must be non-empty, above 0 and below 2^32-1", ErrIdentity, r.First, r.Count)
	case r.Contains(65534):
		return r, fmt.Errorf("%w: tenant id range %d+%d holds 65534 (nobody)", ErrIdentity, r.First, r.Count)
	case shared.switchTo && (r.Contains(shared.uid) || r.Contains(shared.gid)):
		return r, fmt.Errorf("%w: tenant id range %d+%d holds the shared sandbox identity %d:%d", ErrIdentity, r.First, r.Count, shared.uid, shared.gid)
	}
	return r, nil
}

// identityFor returns the identity a policy runs as: its own ids when it
// names them and termgate is root, the launcher's otherwise.
func (l *Launcher) identityFor(p Policy) (identity, error) {
	if !l.id.switchTo || (p.UID == 0 && p.GID == 0) {
		return l.id, nil
	}
	r := l.cfg.TenantUIDs
	if !r.Contains(p.UID) || !r.Contains(p.GID) {
		return identity{}, fmt.Errorf("%w: uid %d, gid %d: outside the tenant id range %d+%d", ErrIdentity, p.UID, p.GID, r.First, r.Count)
	}
	return identity{uid: p.UID, gid: p.GID, switchTo: true, shared: l.id.uid, tenants: r}, nil
}

func chooseIdentity(uid, gid uint32) (identity, error) {
	if os.Geteuid() != 0 {
		return identity{uid: uint32(os.Geteuid()), gid: uint32(os.Getegid())}, nil
	}
	if uid == 0 {
		uid = DefaultUID
	}
	if gid == 0 {
		gid = DefaultGID
	}
	if uid == 65534 || gid == 65534 {
		return identity{}, fmt.Errorf("%w: uid/gid 65534 (nobody) may use the reserved disk blocks; choose a dedicated id", ErrIdentity)
	}
	return identity{uid: uid, gid: gid, switchTo: true}, nil
}

// prepareWorkspace opens the workspace without following symlinks and, as
// root, hands it to the sandbox identity so the sandbox can write it.
func (id identity) prepareWorkspace(path string) (*os.File, error) {
	f, err := openNoFollow(path, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	if !id.switchTo {
		return f, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("workspace: stat %s: %w", path, err)
	}
	if st.Uid != id.uid || st.Gid != id.gid {
		if err := unix.Fchown(int(f.Fd()), int(id.uid), int(id.gid)); err != nil {
			f.Close()
			return nil, fmt.Errorf("workspace: hand %s to the sandbox identity: %w", path, err)
		}
	}
	return f, nil
}
