package sandbox

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The output copiers' system calls on a descriptor in non-blocking mode
// go to the kernel without the scheduler's system-call bookkeeping
// (RawSyscall): each returns at once, and a call through the scheduler
// (unix.Read and the like) wakes the runtime's monitor thread whenever
// the process was idle, which for a keystroke's echo is a wakeup, a few
// sleeps and a context switch of their own. Only for descriptors that
// isNonBlocking approved: a raw call that blocked would hold its P.

// isNonBlocking reports whether fd is in non-blocking mode.
func isNonBlocking(fd uintptr) bool {
	flags, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
	return err == nil && flags&unix.O_NONBLOCK != 0
}

// rawRead is read(2) of a non-blocking fd; n is 0 on error.
func rawRead(fd int, p []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawWaiting asks the kernel how many bytes wait to be read from fd
// (FIONREAD, TIOCINQ on a terminal).
func rawWaiting(fd int) (int, error) {
	var k int32
	_, _, e := unix.RawSyscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCINQ, uintptr(unsafe.Pointer(&k)))
	if e != 0 {
		return 0, e
	}
	return int(k), nil
}

// rawPollNow polls fd for input without waiting and returns its events,
// 0 when none (or on error).
func rawPollNow(fd int) int16 {
	pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	var ts unix.Timespec
	n, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	if e != 0 || n != 1 {
		return 0
	}
	return pfd.Revents
}
