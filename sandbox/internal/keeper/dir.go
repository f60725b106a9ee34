//go:build linux

package keeper

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Names inside the state directory.
const (
	SocketName = "keeper.sock"
	LockName   = "keeper.lock"
)

// checkDir returns dir made absolute once it is safe to keep state in
// (CheckDir), without making it.
func checkDir(dir string) (string, error) { return openDir(dir, false) }

// CheckDir returns dir made absolute once it is a real directory (not a
// symbolic link) owned by our effective uid with mode 0700, in a parent
// that nobody else may change: the parent belongs to root or to us, and
// when others may write it, it is sticky (/tmp, /dev/shm), where only the
// entry's owner, us, may rename or remove it. Only then is nothing in it
// reachable by anyone else, and no name in it can be swapped for a link
// between the check and its use. With create it makes dir (0700) when it
// does not exist, after checking the parent, and makes an empty one of
// ours 0700 (a fresh volume's mount point). Errors wrap ErrDir and say
// which of these fails.
func CheckDir(dir string, create bool) (string, error) { return openDir(dir, create) }

func openDir(dir string, create bool) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("%w: no state directory", ErrDir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrDir, err)
	}
	parentPath, name := filepath.Dir(abs), filepath.Base(abs)
	if abs == parentPath {
		return "", fmt.Errorf("%w: %s is no directory of its own", ErrDir, abs)
	}
	parent, err := unix.Open(parentPath, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("%w: open %s: %w", ErrDir, parentPath, err)
	}
	defer unix.Close(parent)
	if err := checkParent(parent, parentPath); err != nil {
		return "", err
	}
	if create {
		if err := unix.Mkdirat(parent, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return "", fmt.Errorf("%w: make %s: %w", ErrDir, abs, err)
		}
	}
	var st unix.Stat_t
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return "", fmt.Errorf("%w: %w", ErrDir, &fs.PathError{Op: "lstat", Path: abs, Err: err})
	}
	if create && widerThanOurs(&st) {
		if err := tighten(parent, name, abs, &st); err != nil {
			return "", err
		}
	}
	if err := checkEntry(abs, &st); err != nil {
		return "", err
	}
	return abs, nil
}

// widerThanOurs reports a directory of ours whose mode lets others in: a
// fresh volume's mount point (a Kubernetes emptyDir is made 0777).
func widerThanOurs(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFDIR && int(st.Uid) == os.Geteuid() && st.Mode&0o7777 != 0o700
}

// tighten makes name, a directory of ours with a wider mode, 0700 and
// then takes it only while it is empty: from the chmod on nobody else
// may add to it, and an entry found then may have been planted by anyone
// before, so the directory is refused. st is updated to what it is now.
func tighten(parent int, name, abs string, st *unix.Stat_t) error {
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: open %s: %w", ErrDir, abs, err)
	}
	d := os.NewFile(uintptr(fd), abs)
	defer d.Close()
	was := st.Mode & 0o7777
	if err := unix.Fchmod(fd, 0o700); err != nil {
		return fmt.Errorf("%w: %s has mode %04o, and making it 0700 failed: %w", ErrDir, abs, was, err)
	}
	if names, _ := d.Readdirnames(1); len(names) > 0 {
		return fmt.Errorf("%w: %s had mode %04o and holds entries others may have made (%s): made it 0700; empty it, or remove it", ErrDir, abs, was, names[0])
	}
	return unix.Fstat(fd, st)
}

// checkParent refuses a parent that someone other than root and us may
// write without the sticky bit.
func checkParent(fd int, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%w: stat %s: %w", ErrDir, path, err)
	}
	switch {
	case st.Uid != 0 && int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%w: its parent %s is owned by uid %d, who may replace it", ErrDir, path, st.Uid)
	case st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
		return fmt.Errorf("%w: its parent %s has mode %04o: writable by others, and not sticky", ErrDir, path, st.Mode&0o7777)
	}
	return nil
}

// checkEntry refuses what is not our own directory of mode 0700.
func checkEntry(abs string, st *unix.Stat_t) error {
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return fmt.Errorf("%w: %s is a symbolic link", ErrDir, abs)
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%w: %s is not a directory", ErrDir, abs)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%w: %s is owned by uid %d, not %d", ErrDir, abs, st.Uid, os.Geteuid())
	case st.Mode&0o7777 != 0o700:
		return fmt.Errorf("%w: %s has mode %04o, want 0700", ErrDir, abs, st.Mode&0o7777)
	}
	return nil
}

// lockDir takes Dir/keeper.lock for the keeper's life: a second keeper on
// the directory gets ErrRunning. The lock file is never removed (removing
// it would let two keepers lock two different files).
func lockDir(dir string) (*os.File, error) {
	f, err := OpenIn(dir, LockName, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("keeper: open lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked", ErrRunning, dir)
		}
		return nil, fmt.Errorf("keeper: lock %s: %w", dir, err)
	}
	return f, nil
}

// listen binds Dir/keeper.sock, replacing a socket a dead keeper left
// (whoever holds the lock owns the path). The listener unlinks it on Close.
func listen(dir string) (*net.UnixListener, error) {
	path := filepath.Join(dir, SocketName)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("keeper: remove stale socket: %w", err)
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("keeper: listen: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("keeper: chmod socket: %w", err)
	}
	return ln, nil
}

// OpenIn opens name in the directory dir relative to a descriptor of dir,
// following a symbolic link at neither (O_NOFOLLOW): a link planted in
// the state directory is refused, never written through.
func OpenIn(dir, name string, flag int, perm os.FileMode) (*os.File, error) {
	d, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, linkError(&fs.PathError{Op: "open", Path: dir, Err: err})
	}
	defer unix.Close(d)
	path := filepath.Join(dir, name)
	fd, err := unix.Openat(d, name, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return nil, linkError(&fs.PathError{Op: "open", Path: path, Err: err})
	}
	return os.NewFile(uintptr(fd), path), nil
}

// linkError says what O_NOFOLLOW's ELOOP means.
func linkError(err *fs.PathError) error {
	if errors.Is(err.Err, unix.ELOOP) {
		return fmt.Errorf("%s is a symbolic link, refused: %w", err.Path, err)
	}
	return err
}

// peerCred returns the credentials of the process at the other end.
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("keeper: peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, fmt.Errorf("keeper: peer credentials: %w", err)
	}
	if cerr != nil {
		return nil, fmt.Errorf("keeper: peer credentials: %w", cerr)
	}
	return cred, nil
}
