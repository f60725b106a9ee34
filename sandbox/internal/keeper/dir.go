//go:build linux

package keeper

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Names inside the state directory.
const (
	SocketName = "keeper.sock"
	LockName   = "keeper.lock"
)

// checkDir returns dir made absolute once it is a real directory (not a
// symbolic link) owned by our effective uid with mode 0700: the socket in
// it must be reachable by nobody else.
func checkDir(dir string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("%w: no state directory", ErrDir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrDir, err)
	}
	fi, err := os.Lstat(abs)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrDir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: %s is not a directory", ErrDir, abs)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", fmt.Errorf("%w: %s: no owner", ErrDir, abs)
	}
	if int(st.Uid) != os.Geteuid() {
		return "", fmt.Errorf("%w: %s is owned by uid %d, not %d", ErrDir, abs, st.Uid, os.Geteuid())
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		return "", fmt.Errorf("%w: %s has mode %04o, want 0700", ErrDir, abs, perm)
	}
	return abs, nil
}

// lockDir takes Dir/keeper.lock for the keeper's life: a second keeper on
// the directory gets ErrRunning. The lock file is never removed (removing
// it would let two keepers lock two different files).
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, LockName), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
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
