//go:build linux

package fdio

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// IsNonBlocking reports whether fd is in non-blocking mode: the raw
// calls of this package may be made on it.
func IsNonBlocking(fd uintptr) bool {
	flags, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
	return err == nil && flags&unix.O_NONBLOCK != 0
}

// Read is read(2) of a non-blocking fd, made raw; n is 0 on error, and
// an interrupted call returns EINTR for the caller to retry.
func Read(fd int, p []byte) (int, error) { return rw(unix.SYS_READ, fd, p) }

// Write is write(2) to a non-blocking fd, made raw; n is 0 on error, and
// an interrupted call returns EINTR for the caller to retry.
func Write(fd int, p []byte) (int, error) { return rw(unix.SYS_WRITE, fd, p) }

// rw is read(2) or write(2) (trap) of p on fd; n is 0 on error.
func rw(trap uintptr, fd int, p []byte) (int, error) {
	n, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// Waiting asks the kernel how many bytes wait to be read from fd
// (FIONREAD, TIOCINQ on a terminal), made raw.
func Waiting(fd int) (int, error) {
	var k int32
	_, _, e := unix.RawSyscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCINQ, uintptr(unsafe.Pointer(&k)))
	if e != 0 {
		return 0, e
	}
	return int(k), nil
}

// PollOutNow reports whether fd is writable now, without waiting.
func PollOutNow(fd int) bool {
	pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLOUT}
	var ts unix.Timespec
	n, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	return e == 0 && n == 1 && pfd.Revents&unix.POLLOUT != 0
}

// PollNow polls fd for input without waiting and returns its events
// (unix.POLLIN and the like), 0 when none (or on error).
func PollNow(fd int) int16 {
	pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	var ts unix.Timespec
	n, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	if e != 0 || n != 1 {
		return 0
	}
	return pfd.Revents
}
