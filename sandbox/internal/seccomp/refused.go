//go:build linux

package seccomp

import "golang.org/x/sys/unix"

// Refusal is a system call the filter refuses whatever its arguments:
// its name as the kernel's syscall tables, libseccomp and container
// runtimes spell it, and the errno the caller gets.
type Refusal struct {
	Name  string
	Errno unix.Errno
}

// Refused lists the system calls the filter refuses whatever their
// arguments, the same on every architecture it knows, in the order of
// its tables: EPERM's, then ENOSYS's. The calls it decides by their
// arguments (ioctl, clone, socket, fallocate, ptrace, process_vm_*) are
// not in it. The result is a fresh slice.
func Refused() []Refusal {
	var out []Refusal
	var names abi // only the names are read, which no arch changes
	for _, c := range names.denied() {
		out = append(out, Refusal{c.name, unix.EPERM})
	}
	for _, c := range noSysCalls {
		out = append(out, Refusal{c.name, unix.ENOSYS})
	}
	return out
}
