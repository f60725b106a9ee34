//go:build linux

package netredirect

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// getsockopt reads a socket option into b; *l is its length in and out.
func getsockopt(fd, level, opt int, b []byte, l *uint32) error {
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(l)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}
