//go:build unix

package cluster

import "syscall"

// noFollow makes an open refuse a symbolic link at the last name.
const noFollow = syscall.O_NOFOLLOW
