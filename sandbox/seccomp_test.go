//go:build linux && (amd64 || arm64)

package sandbox

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// seccompInput is struct seccomp_data without ip, which the filter ignores.
type seccompInput struct {
	nr   uint32
	arch uint32
	args [6]uint64
}

// encode lays the input out as the kernel does, in native byte order.
func (in seccompInput) encode() []byte {
	b := binary.NativeEndian.AppendUint32(nil, in.nr)
	b = binary.NativeEndian.AppendUint32(b, in.arch)
	b = binary.NativeEndian.AppendUint64(b, 0) // ip
	for _, a := range in.args {
		b = binary.NativeEndian.AppendUint64(b, a)
	}
	return b
}

// decodeBPF parses raw sock_filter bytes back into instructions.
func decodeBPF(t *testing.T, raw []byte) []unix.SockFilter {
	t.Helper()
	if len(raw) == 0 || len(raw)%8 != 0 {
		t.Fatalf("program is %d bytes, want a positive multiple of 8", len(raw))
	}
	prog := make([]unix.SockFilter, len(raw)/8)
	for i := range prog {
		b := raw[8*i:]
		prog[i] = unix.SockFilter{
			Code: binary.NativeEndian.Uint16(b),
			Jt:   b[2],
			Jf:   b[3],
			K:    binary.NativeEndian.Uint32(b[4:]),
		}
	}
	return prog
}

// runBPF interprets the classic BPF opcodes the filter uses, with the
// kernel's rules: loads are aligned 32-bit words inside seccomp_data, jumps
// only go forward, and the program must end in a return.
func runBPF(prog []unix.SockFilter, data []byte) (uint32, error) {
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			if in.K%4 != 0 || int(in.K)+4 > len(data) {
				return 0, fmt.Errorf("pc %d: load at bad offset %d", pc, in.K)
			}
			a = binary.NativeEndian.Uint32(data[in.K:])
		case unix.BPF_JMP | unix.BPF_JA:
			pc += int(in.K)
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			pc += bpfBranch(in, a == in.K)
		case unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
			pc += bpfBranch(in, a >= in.K)
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			pc += bpfBranch(in, a&in.K != 0)
		case unix.BPF_RET | unix.BPF_K:
			return in.K, nil
		default:
			return 0, fmt.Errorf("pc %d: opcode %#x not supported", pc, in.Code)
		}
	}
	return 0, fmt.Errorf("fell off the end of a %d-instruction program", len(prog))
}

func bpfBranch(in unix.SockFilter, taken bool) int {
	if taken {
		return int(in.Jt)
	}
	return int(in.Jf)
}

func seccompVerdictName(v uint32) string {
	switch {
	case v == seccompAllow:
		return "allow"
	case v == seccompKill:
		return "kill"
	case v&unix.SECCOMP_RET_ACTION_FULL == unix.SECCOMP_RET_ERRNO:
		return unix.ErrnoName(unix.Errno(v & unix.SECCOMP_RET_DATA))
	}
	return fmt.Sprintf("%#x", v)
}

// seccompWantDenied restates the policy independently of seccompDenied.
var seccompWantDenied = map[string]uint32{
	"keyctl": unix.SYS_KEYCTL, "add_key": unix.SYS_ADD_KEY, "request_key": unix.SYS_REQUEST_KEY,
	"bpf": unix.SYS_BPF, "perf_event_open": unix.SYS_PERF_EVENT_OPEN, "userfaultfd": unix.SYS_USERFAULTFD,
	"mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2, "pivot_root": unix.SYS_PIVOT_ROOT,
	"move_mount": unix.SYS_MOVE_MOUNT, "open_tree": unix.SYS_OPEN_TREE, "open_tree_attr": unix.SYS_OPEN_TREE_ATTR,
	"fsopen": unix.SYS_FSOPEN, "fsconfig": unix.SYS_FSCONFIG, "fsmount": unix.SYS_FSMOUNT,
	"fspick": unix.SYS_FSPICK, "mount_setattr": unix.SYS_MOUNT_SETATTR,
	"kexec_load": unix.SYS_KEXEC_LOAD, "kexec_file_load": unix.SYS_KEXEC_FILE_LOAD,
	"init_module": unix.SYS_INIT_MODULE, "finit_module": unix.SYS_FINIT_MODULE,
	"delete_module": unix.SYS_DELETE_MODULE, "open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT,
	"unshare": unix.SYS_UNSHARE, "setns": unix.SYS_SETNS, "pidfd_getfd": unix.SYS_PIDFD_GETFD,
}

// seccompErrno is the verdict that fails a call with e, restated here so
// the tests do not lean on the filter's own constants.
func seccompErrno(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }

type seccompCase struct {
	name string
	in   seccompInput
	want uint32
}

func seccompCases() []seccompCase {
	native := seccompArches[runtime.GOARCH].audit
	call := func(nr uint32, args ...uint64) seccompInput {
		in := seccompInput{nr: nr, arch: native}
		copy(in.args[:], args)
		return in
	}
	const thread = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
		unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS |
		unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID
	cases := []seccompCase{
		{"ioctl TIOCSTI", call(unix.SYS_IOCTL, 0, unix.TIOCSTI), seccompEPERM},
		// The kernel truncates cmd to 32 bits: this is TIOCSTI too.
		{"ioctl TIOCSTI high bits", call(unix.SYS_IOCTL, 0, 0x1_0000_5412), seccompEPERM},
		{"ioctl TIOCSTI all high bits", call(unix.SYS_IOCTL, 0, 0xffff_ffff_0000_5412), seccompEPERM},
		{"ioctl TIOCLINUX", call(unix.SYS_IOCTL, 3, unix.TIOCLINUX), seccompEPERM},
		{"ioctl TCGETS", call(unix.SYS_IOCTL, 0, unix.TCGETS), seccompAllow},
		{"ioctl TIOCSWINSZ", call(unix.SYS_IOCTL, 0, unix.TIOCSWINSZ), seccompAllow},
		{"write with TIOCSTI as an argument", call(unix.SYS_WRITE, 1, unix.TIOCSTI), seccompAllow},
		{"clone3", call(unix.SYS_CLONE3), seccompENOSYS},
		{"clone thread", call(unix.SYS_CLONE, thread), seccompAllow},
		{"clone fork", call(unix.SYS_CLONE, uint64(unix.SIGCHLD)), seccompAllow},
		// Bits above 31 never reach the kernel's clone flags.
		{"clone newuser in high word", call(unix.SYS_CLONE, unix.CLONE_NEWUSER<<32|uint64(unix.SIGCHLD)), seccompAllow},
		{"foreign arch i386", seccompInput{nr: unix.SYS_GETPID, arch: unix.AUDIT_ARCH_I386}, seccompKill},
		{"foreign arch arm", seccompInput{nr: unix.SYS_GETPID, arch: unix.AUDIT_ARCH_ARM}, seccompKill},
		{"foreign arch zero", seccompInput{nr: unix.SYS_GETPID}, seccompKill},
		{"unknown syscall", call(1000), seccompAllow},
	}
	for _, nr := range []uint32{unix.SYS_READ, unix.SYS_WRITE, unix.SYS_PTRACE, unix.SYS_EXECVE, unix.SYS_GETPID} {
		cases = append(cases, seccompCase{fmt.Sprintf("syscall %d", nr), call(nr), seccompAllow})
	}
	for name, nr := range seccompWantDenied {
		cases = append(cases, seccompCase{name, call(nr), seccompEPERM})
	}
	for _, flag := range []uint64{unix.CLONE_NEWNS, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC,
		unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET, unix.CLONE_NEWCGROUP} {
		in := call(unix.SYS_CLONE, flag|uint64(unix.SIGCHLD))
		cases = append(cases, seccompCase{fmt.Sprintf("clone %#x", flag), in, seccompEPERM})
	}
	cases = append(cases, seccompSocketCases(call)...)
	cases = append(cases, seccompFallocateCases(call)...)
	cases = append(cases, seccompPtraceCases(call)...)
	return append(cases, seccompArchCases(call)...)
}

// seccompSocketCases: only the families a sandbox needs can be created.
// The kernel reads the family as an int, so the high word is ignored.
func seccompSocketCases(call func(uint32, ...uint64) seccompInput) []seccompCase {
	var cases []seccompCase
	for _, nr := range []uint32{unix.SYS_SOCKET, unix.SYS_SOCKETPAIR} {
		for _, af := range []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK, 1<<32 | unix.AF_UNIX} {
			cases = append(cases, seccompCase{fmt.Sprintf("socket %d family %#x", nr, af), call(nr, af, unix.SOCK_STREAM), seccompAllow})
		}
		for _, af := range []uint64{unix.AF_VSOCK, 1<<32 | unix.AF_VSOCK, 0xffff_ffff_0000_0000 | unix.AF_VSOCK,
			unix.AF_UNSPEC, unix.AF_BLUETOOTH, unix.AF_CAN, unix.AF_TIPC, unix.AF_RDS, unix.AF_KCM,
			unix.AF_PACKET, unix.AF_ALG, unix.AF_XDP, unix.AF_KEY, unix.AF_MAX, 0xffff_ffff} {
			cases = append(cases, seccompCase{fmt.Sprintf("socket %d family %#x", nr, af), call(nr, af, unix.SOCK_STREAM), seccompErrno(unix.EAFNOSUPPORT)})
		}
	}
	for _, nr := range []uint32{unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER} {
		cases = append(cases, seccompCase{fmt.Sprintf("io_uring %d", nr), call(nr), seccompENOSYS})
	}
	return append(cases,
		seccompCase{"ioctl TIOCSETD", call(unix.SYS_IOCTL, 0, unix.TIOCSETD), seccompEPERM},
		seccompCase{"ioctl TIOCSETD high bits", call(unix.SYS_IOCTL, 0, 1<<32|unix.TIOCSETD), seccompEPERM},
		seccompCase{"ioctl TIOCGETD", call(unix.SYS_IOCTL, 0, unix.TIOCGETD), seccompAllow},
	)
}

// seccompFallocateCases: only the modes the kernel checks against
// RLIMIT_FSIZE, or that cannot grow a file, are let through.
func seccompFallocateCases(call func(uint32, ...uint64) seccompInput) []seccompCase {
	var cases []seccompCase
	for _, mode := range []uint64{0, unix.FALLOC_FL_ZERO_RANGE, unix.FALLOC_FL_COLLAPSE_RANGE,
		unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE, 1 << 32} {
		cases = append(cases, seccompCase{fmt.Sprintf("fallocate %#x", mode), call(unix.SYS_FALLOCATE, 3, mode, 0, 1), seccompAllow})
	}
	for _, mode := range []uint64{unix.FALLOC_FL_KEEP_SIZE, 1<<32 | unix.FALLOC_FL_KEEP_SIZE,
		unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_INSERT_RANGE,
		unix.FALLOC_FL_UNSHARE_RANGE, unix.FALLOC_FL_UNSHARE_RANGE | unix.FALLOC_FL_KEEP_SIZE,
		unix.FALLOC_FL_PUNCH_HOLE, unix.FALLOC_FL_COLLAPSE_RANGE | unix.FALLOC_FL_KEEP_SIZE,
		unix.FALLOC_FL_NO_HIDE_STALE, unix.FALLOC_FL_WRITE_ZEROES, 0x100, 0x8000_0000, 0xffff_ffff} {
		cases = append(cases, seccompCase{fmt.Sprintf("fallocate %#x", mode), call(unix.SYS_FALLOCATE, 3, mode, 0, 1), seccompErrno(unix.EOPNOTSUPP)})
	}
	return cases
}

// seccompPtraceCases: the sandbox's init cannot be attached to or have its
// memory read or written; its other processes can. The kernel reads the
// pid as a pid_t, so the high word is ignored.
func seccompPtraceCases(call func(uint32, ...uint64) seccompInput) []seccompCase {
	cases := []seccompCase{
		{"pidfd_open init", call(unix.SYS_PIDFD_OPEN, 1), seccompAllow},
		{"kill init", call(unix.SYS_KILL, 1, uint64(unix.SIGTERM)), seccompAllow},
	}
	for _, pid := range []uint64{1, 1<<32 | 1, 0xffff_ffff_0000_0001} {
		for _, req := range []uint64{unix.PTRACE_ATTACH, unix.PTRACE_SEIZE} {
			cases = append(cases, seccompCase{fmt.Sprintf("ptrace %#x pid %#x", req, pid), call(unix.SYS_PTRACE, req, pid), seccompEPERM})
		}
		for _, nr := range []uint32{unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV} {
			cases = append(cases, seccompCase{fmt.Sprintf("process_vm %d pid %#x", nr, pid), call(nr, pid), seccompEPERM})
		}
	}
	for _, pid := range []uint64{0, 2, 3, 0xffff_ffff, 1 << 32} {
		for _, req := range []uint64{unix.PTRACE_ATTACH, unix.PTRACE_SEIZE} {
			cases = append(cases, seccompCase{fmt.Sprintf("ptrace %#x pid %#x", req, pid), call(unix.SYS_PTRACE, req, pid), seccompAllow})
		}
		for _, nr := range []uint32{unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV} {
			cases = append(cases, seccompCase{fmt.Sprintf("process_vm %d pid %#x", nr, pid), call(nr, pid), seccompAllow})
		}
	}
	for _, req := range []uint64{unix.PTRACE_TRACEME, unix.PTRACE_PEEKDATA, unix.PTRACE_INTERRUPT, unix.PTRACE_DETACH} {
		cases = append(cases, seccompCase{fmt.Sprintf("ptrace %#x pid 1", req), call(unix.SYS_PTRACE, req, 1), seccompAllow})
	}
	return cases
}

// seccompArchCases covers the x32 ABI, which only x86_64 has.
func seccompArchCases(call func(uint32, ...uint64) seccompInput) []seccompCase {
	if runtime.GOARCH != "amd64" {
		return []seccompCase{{"x32 bit means nothing here", call(x32SyscallBit | 39), seccompAllow}}
	}
	return []seccompCase{
		{"x32 getpid", call(x32SyscallBit | 39), seccompENOSYS},
		{"x32 keyctl", call(x32SyscallBit | 250), seccompENOSYS},
		{"x32 top", call(0xfffffffe), seccompENOSYS},
		{"skipped by a tracer", call(seccompSkippedNr), seccompAllow},
	}
}

func TestSeccompVerdicts(t *testing.T) {
	t.Parallel()
	prog := decodeBPF(t, seccompProgram())
	for _, tt := range seccompCases() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := runBPF(prog, tt.in.encode())
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("verdict %s, want %s", seccompVerdictName(got), seccompVerdictName(tt.want))
			}
		})
	}
}

func TestSeccompProgramShape(t *testing.T) {
	t.Parallel()
	raw := seccompProgram()
	if len(raw)%8 != 0 || len(raw)/8 >= bpfMaxInsns {
		t.Fatalf("program is %d bytes (%d instructions)", len(raw), len(raw)/8)
	}
	t.Logf("%d instructions", len(raw)/8)
	raw[0] ^= 0xff
	if again := seccompProgram(); again[0] == raw[0] {
		t.Error("seccompProgram shares its bytes with the caller")
	}
}

func TestSeccompBuilderErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		build func(b *bpfBuilder)
	}{
		{"empty", func(b *bpfBuilder) {}},
		{"undefined label", func(b *bpfBuilder) { b.jump(unix.BPF_JEQ, 1, "nowhere", ""); b.ret(0) }},
		{"backward", func(b *bpfBuilder) { b.label("top"); b.ret(0); b.jump(unix.BPF_JEQ, 1, "top", ""); b.ret(0) }},
		{"past the end", func(b *bpfBuilder) { b.jump(unix.BPF_JEQ, 1, "end", ""); b.ret(0); b.label("end") }},
		{"twice", func(b *bpfBuilder) { b.label("a"); b.label("a"); b.ret(0) }},
		{"too far", func(b *bpfBuilder) {
			b.jump(unix.BPF_JEQ, 1, "far", "")
			for range 256 {
				b.ret(0)
			}
			b.label("far")
			b.ret(0)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBPFBuilder()
			tt.build(b)
			if prog, err := b.assemble(); err == nil {
				t.Errorf("assembled %d instructions, want an error", len(prog))
			}
		})
	}
}

// seccompChildEnv makes TestSeccompKernel act as the probing child.
const seccompChildEnv = "TERMGATE_SECCOMP_CHILD"

// How a probe's result without any filter relates to its result under it.
type seccompBare int

const (
	seccompBareSame  seccompBare = iota // the filter lets the call through
	seccompBareOther                    // only the filter produces the result
	seccompBareAny                      // the host may refuse the call by itself
)

type seccompProbe struct {
	name string
	call func() unix.Errno
	want string // result under the filter
	bare seccompBare
}

func seccompSys(nr uintptr, args ...uintptr) func() unix.Errno {
	return func() unix.Errno {
		var a [6]uintptr
		copy(a[:], args)
		_, _, errno := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
		return errno
	}
}

// seccompProbes are real calls whose results tell the filter's verdict
// apart from the kernel's own answer: each argument set makes the kernel
// fail with something other than EPERM or ENOSYS when nothing filters it
// (ENOTTY on /dev/null, EINVAL for impossible clone flags, ...), so no
// probe creates a namespace, a key or a process.
func seccompProbes(devNull uintptr) []seccompProbe {
	const userFS = unix.CLONE_NEWUSER | unix.CLONE_FS // always EINVAL
	probes := []seccompProbe{
		{"ioctl_tiocsti", seccompSys(unix.SYS_IOCTL, devNull, unix.TIOCSTI), "EPERM", seccompBareOther},
		{"ioctl_tiocsti_high", seccompSys(unix.SYS_IOCTL, devNull, 0x1_0000_5412), "EPERM", seccompBareOther},
		{"ioctl_tioclinux", seccompSys(unix.SYS_IOCTL, devNull, unix.TIOCLINUX), "EPERM", seccompBareOther},
		{"ioctl_tcgets", seccompSys(unix.SYS_IOCTL, devNull, unix.TCGETS), "ENOTTY", seccompBareSame},
		// A multithreaded process may not enter a new user namespace.
		{"unshare_newuser", seccompSys(unix.SYS_UNSHARE, unix.CLONE_NEWUSER), "EPERM", seccompBareOther},
		{"clone_newuser", seccompSys(unix.SYS_CLONE, userFS), "EPERM", seccompBareOther},
		// CLONE_THREAD without CLONE_SIGHAND is EINVAL: it proves the call
		// reached the kernel without creating anything.
		{"clone_thread", seccompSys(unix.SYS_CLONE, unix.CLONE_THREAD), "EINVAL", seccompBareSame},
		{"clone_thread_high_newuser", seccompSys(unix.SYS_CLONE, unix.CLONE_NEWUSER<<32|unix.CLONE_THREAD), "EINVAL", seccompBareSame},
		{"clone3", seccompSys(unix.SYS_CLONE3, 0, 0), "ENOSYS", seccompBareOther},
		{"keyctl", seccompSys(unix.SYS_KEYCTL, 0xffff), "EPERM", seccompBareOther},
		{"bpf", seccompSys(unix.SYS_BPF, 0xffff, 0, 0), "EPERM", seccompBareAny},
		{"mount", seccompSys(unix.SYS_MOUNT, 0, 0, 0, 0, 0), "EPERM", seccompBareAny},
		{"getpid", seccompGetpid, "ok", seccompBareSame},
		// Not our tracee: ESRCH shows ptrace itself stays allowed.
		{"ptrace", seccompSys(unix.SYS_PTRACE, unix.PTRACE_PEEKDATA, uintptr(os.Getpid())), "ESRCH", seccompBareSame},
	}
	probes = append(probes, seccompNewProbes(devNull)...)
	if runtime.GOARCH == "amd64" {
		x32 := seccompProbe{"x32_getpid", seccompSys(x32SyscallBit | 39), "ENOSYS", seccompBareAny}
		probes = append(probes, x32)
	}
	return probes
}

// seccompBadSocketType is a socket type the kernel refuses with EINVAL
// before it looks at the family, so no socket probe creates a socket.
const seccompBadSocketType = 0x100

// seccompNewProbes cover the socket families, io_uring, TIOCSETD,
// fallocate modes, pidfd_getfd and ptrace of pid 1. Each argument set fails
// in the kernel before anything is created or attached to: a bad socket
// type, fd -1, a NULL io_uring_params, PTRACE_SEIZE with a nonzero addr
// (EIO), process_vm_readv with unknown flags (EINVAL). EOPNOTSUPP is
// spelled ENOTSUP, its other name on Linux.
func seccompNewProbes(devNull uintptr) []seccompProbe {
	const bad = ^uintptr(0) // fd -1
	fall := func(mode uintptr) func() unix.Errno { return seccompSys(unix.SYS_FALLOCATE, bad, mode, 0, 1) }
	sock := func(nr, af uintptr) func() unix.Errno { return seccompSys(nr, af, seccompBadSocketType, 0, 0) }
	return []seccompProbe{
		{"socket_vsock", sock(unix.SYS_SOCKET, unix.AF_VSOCK), "EAFNOSUPPORT", seccompBareOther},
		{"socket_vsock_high", sock(unix.SYS_SOCKET, 1<<32|unix.AF_VSOCK), "EAFNOSUPPORT", seccompBareOther},
		{"socketpair_vsock", sock(unix.SYS_SOCKETPAIR, unix.AF_VSOCK), "EAFNOSUPPORT", seccompBareOther},
		{"socket_packet", sock(unix.SYS_SOCKET, unix.AF_PACKET), "EAFNOSUPPORT", seccompBareOther},
		{"socket_alg", sock(unix.SYS_SOCKET, unix.AF_ALG), "EAFNOSUPPORT", seccompBareOther},
		{"socket_unix", sock(unix.SYS_SOCKET, unix.AF_UNIX), "EINVAL", seccompBareSame},
		{"socketpair_unix", sock(unix.SYS_SOCKETPAIR, unix.AF_UNIX), "EINVAL", seccompBareSame},
		{"socket_inet", sock(unix.SYS_SOCKET, unix.AF_INET), "EINVAL", seccompBareSame},
		{"socket_inet6", sock(unix.SYS_SOCKET, unix.AF_INET6), "EINVAL", seccompBareSame},
		{"socket_netlink", sock(unix.SYS_SOCKET, unix.AF_NETLINK), "EINVAL", seccompBareSame},
		// Without the filter: EFAULT, EBADF, or EPERM/ENOSYS where the
		// host disabled io_uring.
		{"io_uring_setup", seccompSys(unix.SYS_IO_URING_SETUP, 1, 0), "ENOSYS", seccompBareAny},
		{"io_uring_enter", seccompSys(unix.SYS_IO_URING_ENTER, bad), "ENOSYS", seccompBareAny},
		{"io_uring_register", seccompSys(unix.SYS_IO_URING_REGISTER, bad), "ENOSYS", seccompBareAny},
		{"ioctl_tiocsetd", seccompSys(unix.SYS_IOCTL, devNull, unix.TIOCSETD), "EPERM", seccompBareOther},
		{"ioctl_tiocsetd_high", seccompSys(unix.SYS_IOCTL, devNull, 1<<32|unix.TIOCSETD), "EPERM", seccompBareOther},
		{"fallocate_plain", fall(0), "EBADF", seccompBareSame},
		{"fallocate_zero", fall(unix.FALLOC_FL_ZERO_RANGE), "EBADF", seccompBareSame},
		{"fallocate_collapse", fall(unix.FALLOC_FL_COLLAPSE_RANGE), "EBADF", seccompBareSame},
		{"fallocate_punch", fall(unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE), "EBADF", seccompBareSame},
		{"fallocate_keep", fall(unix.FALLOC_FL_KEEP_SIZE), "ENOTSUP", seccompBareOther},
		{"fallocate_keep_high", fall(1<<32 | unix.FALLOC_FL_KEEP_SIZE), "ENOTSUP", seccompBareOther},
		{"fallocate_zero_keep", fall(unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE), "ENOTSUP", seccompBareOther},
		{"fallocate_insert", fall(unix.FALLOC_FL_INSERT_RANGE), "ENOTSUP", seccompBareOther},
		{"fallocate_unshare", fall(unix.FALLOC_FL_UNSHARE_RANGE), "ENOTSUP", seccompBareOther},
		{"pidfd_getfd", seccompSys(unix.SYS_PIDFD_GETFD, bad, 0, 0), "EPERM", seccompBareOther},
		{"ptrace_seize_init", seccompSys(unix.SYS_PTRACE, unix.PTRACE_SEIZE, 1, 1), "EPERM", seccompBareOther},
		{"ptrace_seize_init_high", seccompSys(unix.SYS_PTRACE, unix.PTRACE_SEIZE, 1<<32|1, 1), "EPERM", seccompBareOther},
		{"process_vm_readv_init", seccompSys(unix.SYS_PROCESS_VM_READV, 1, 0, 0, 0, 0, 1), "EPERM", seccompBareOther},
		{"process_vm_writev_init", seccompSys(unix.SYS_PROCESS_VM_WRITEV, 1, 0, 0, 0, 0, 1), "EPERM", seccompBareOther},
		{"process_vm_readv_self", seccompSys(unix.SYS_PROCESS_VM_READV, uintptr(os.Getpid()), 0, 0, 0, 0, 1), "EINVAL", seccompBareSame},
	}
}

func seccompGetpid() unix.Errno {
	pid, _, errno := unix.Syscall(unix.SYS_GETPID, 0, 0, 0)
	if errno == 0 && int(pid) != os.Getpid() {
		return unix.EBADE // any errno no probe expects
	}
	return errno
}

func seccompErrnoName(e unix.Errno) string {
	if e == 0 {
		return "ok"
	}
	if name := unix.ErrnoName(e); name != "" {
		return name
	}
	return fmt.Sprintf("errno%d", int(e))
}

// runSeccompChild runs the probes and prints one "probe NAME RESULT" line
// each. In mode "load" it first installs the filter on every thread.
func runSeccompChild(t *testing.T, mode string) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	devNull, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	if mode == "load" {
		loadSeccomp(t, decodeBPF(t, seccompProgram()))
	}
	for _, p := range seccompProbes(devNull.Fd()) {
		fmt.Printf("probe %s %s\n", p.name, seccompErrnoName(p.call()))
	}
}

// loadSeccomp installs prog on every thread of the process (TSYNC), as
// bwrap does for the sandboxed command.
func loadSeccomp(t *testing.T, prog []unix.SockFilter) {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		t.Fatalf("no_new_privs: %v", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	tid, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		t.Fatalf("seccomp: %v", errno)
	}
	if tid != 0 {
		t.Fatalf("seccomp: thread %d could not take the filter", tid)
	}
}

// seccompChild returns the command that runs the probes in mode, started
// through wrapper (e.g. bwrap and its options) when one is given.
func seccompChild(t *testing.T, mode string, wrapper ...string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := slices.Concat(wrapper, []string{exe, "-test.run=^TestSeccompKernel$"})
	cmd := exec.CommandContext(t.Context(), args[0], args[1:]...)
	cmd.Env = append(os.Environ(), seccompChildEnv+"="+mode)
	return cmd
}

// seccompResults runs cmd and parses the probe lines it prints.
func seccompResults(t *testing.T, cmd *exec.Cmd) map[string]string {
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	got := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "probe" {
			got[f[1]] = f[2]
		}
	}
	return got
}

// checkSeccompResults compares probe results from a filtered child, or
// from an unfiltered one, which shows the probes can tell the difference.
func checkSeccompResults(t *testing.T, got map[string]string, filtered bool) {
	for _, p := range seccompProbes(0) {
		r, ok := got[p.name]
		switch {
		case !ok:
			t.Errorf("%s: no result", p.name)
		case filtered || p.bare == seccompBareSame:
			if r != p.want {
				t.Errorf("%s = %s, want %s (filtered %v)", p.name, r, p.want, filtered)
			}
		case p.bare == seccompBareOther && r == p.want:
			t.Errorf("%s = %s without a filter: the probe cannot see the filter", p.name, r)
		}
	}
}

func TestSeccompKernel(t *testing.T) {
	if mode := os.Getenv(seccompChildEnv); mode != "" {
		runSeccompChild(t, mode)
		return
	}
	t.Parallel()
	for _, tt := range []struct {
		mode     string
		filtered bool
	}{{"probe", false}, {"load", true}} {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			got := seccompResults(t, seccompChild(t, tt.mode))
			checkSeccompResults(t, got, tt.filtered)
		})
	}
}

// TestSeccompBwrap hands the program to bwrap exactly as the launcher
// does, which checks the byte layout bwrap expects.
func TestSeccompBwrap(t *testing.T) {
	t.Parallel()
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bwrap is required in CI: %v", err)
		}
		t.Skipf("bwrap not found: %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := w.Write(seccompProgram()); err != nil {
		t.Fatal(err)
	}
	w.Close()
	cmd := seccompChild(t, "probe", bwrap, "--ro-bind", "/", "/", "--dev", "/dev",
		"--proc", "/proc", "--unshare-all", "--die-with-parent", "--seccomp", "3", "--")
	cmd.ExtraFiles = []*os.File{r} // fd 3
	checkSeccompResults(t, seccompResults(t, cmd), true)
}

// needPython returns the interpreter the in-sandbox tests run, skipping
// when it is missing, except under CI.
func needPython(t *testing.T) string {
	t.Helper()
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required in CI: %v", python, err)
		}
		t.Skipf("%s not found: %v", python, err)
	}
	return python
}

// seccompSandboxScript makes real calls from inside a sandbox and prints
// one "NAME RESULT" line each, RESULT being ok or the errno's name. The
// system call numbers come from Go, so the script runs on any arch.
const seccompSandboxScript = `
import ctypes, errno, os, sys, time
NR = {%s}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def call(name, nr, *args):
    r = libc.syscall(ctypes.c_long(NR[nr]), *[ctypes.c_long(a) for a in args])
    e = ctypes.get_errno()
    print(name, "ok" if r >= 0 else errno.errorcode.get(e, str(e)), flush=True)
    return r

def addr(obj):
    return ctypes.addressof(obj)

class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

# Socket families: the four a sandbox needs work, the rest are refused.
pair = (ctypes.c_int * 2)()
call("socketpair_unix", "socketpair", 1, 1, 0, addr(pair))
call("socket_inet", "socket", 2, 1, 0)
call("socket_inet6", "socket", 10, 1, 0)
call("socket_netlink", "socket", 16, 3, 0)
call("socketpair_vsock", "socketpair", 40, 1, 0, addr(pair))
for name, af, typ in [("vsock", 40, 1), ("vsock_high", 1 << 32 | 40, 1), ("packet", 17, 3),
                      ("bluetooth", 31, 5), ("can", 29, 3), ("tipc", 30, 5), ("rds", 21, 5),
                      ("kcm", 41, 2), ("alg", 38, 5), ("xdp", 44, 3)]:
    call("socket_" + name, "socket", af, typ, 0)

# io_uring: ENOSYS, so liburing users fall back to plain calls.
params = (ctypes.c_char * 120)()
call("io_uring_setup", "io_uring_setup", 1, addr(params))
call("io_uring_enter", "io_uring_enter", -1, 0, 0, 0, 0, 0)
call("io_uring_register", "io_uring_register", -1, 0, 0, 0)

# TIOCSETD is refused like TIOCSTI; TIOCGETD still answers.
master, slave = os.openpty()
ldisc = ctypes.c_int(0)
call("ioctl_tiocgetd", "ioctl", slave, NR["TIOCGETD"], addr(ldisc))
call("ioctl_tiocsetd", "ioctl", slave, NR["TIOCSETD"], addr(ldisc))
call("ioctl_tiocsetd_high", "ioctl", slave, 1 << 32 | NR["TIOCSETD"], addr(ldisc))

# fallocate: the file-size ceiling is 1 MiB, and only modes the kernel
# checks against it, or that cannot grow the file, are allowed.
fd = os.open("/workspace/falloc", os.O_RDWR | os.O_CREAT, 0o644)
call("fallocate_plain", "fallocate", fd, 0, 0, 65536)
call("fallocate_punch", "fallocate", fd, 3, 0, 4096)
call("fallocate_zero", "fallocate", fd, 0x10, 0, 8192)
call("fallocate_collapse", "fallocate", fd, 0x08, 0, 4096)
call("fallocate_plain_past_limit", "fallocate", fd, 0, 0, 4 << 20)
call("fallocate_keep", "fallocate", fd, 0x01, 0, 4 << 20)
call("fallocate_zero_keep", "fallocate", fd, 0x11, 0, 4 << 20)
call("fallocate_insert", "fallocate", fd, 0x20, 0, 4096)
call("fallocate_unshare", "fallocate", fd, 0x40, 0, 4096)
call("fallocate_unknown", "fallocate", fd, 0x100, 0, 4096)
print("falloc_blocks_kib", os.fstat(fd).st_blocks // 2, flush=True)

# ptrace and friends: a child can be debugged, the sandbox's init cannot.
buf = ctypes.create_string_buffer(b"hello")
child = os.fork()
if child == 0:
    while True:
        time.sleep(1)
WALL = 0x40000000
def release(pid, seized):
    if seized:
        libc.syscall(ctypes.c_long(NR["ptrace"]), ctypes.c_long(0x4207), ctypes.c_long(pid), None, None)
    os.waitpid(pid, WALL)
    libc.syscall(ctypes.c_long(NR["ptrace"]), ctypes.c_long(17), ctypes.c_long(pid), None, None)

for name, pid in [("child", child), ("init", 1), ("init_high", 1 << 32 | 1)]:
    if call("ptrace_attach_" + name, "ptrace", 16, pid, 0, 0) >= 0:
        release(pid & 0xffffffff, False)
    if call("ptrace_seize_" + name, "ptrace", 0x4206, pid, 0, 0) >= 0:
        release(pid & 0xffffffff, True)
    local = iovec(addr(buf), 5)
    remote = iovec(addr(buf) if pid == child else 0, 5)
    call("process_vm_readv_" + name, "process_vm_readv", pid, addr(local), 1, addr(remote), 1, 0)
    call("process_vm_writev_" + name, "process_vm_writev", pid, addr(local), 1, addr(remote), 1, 0)
pidfd = call("pidfd_open_child", "pidfd_open", child, 0)
call("pidfd_open_init", "pidfd_open", 1, 0)
call("pidfd_getfd_child", "pidfd_getfd", pidfd, 0, 0)
os.kill(child, 9)
os.waitpid(child, 0)
`

// seccompSandboxNumbers are the numbers the script needs, as Python.
func seccompSandboxNumbers() string {
	nrs := []struct {
		name string
		nr   uint32
	}{
		{"socket", unix.SYS_SOCKET}, {"socketpair", unix.SYS_SOCKETPAIR},
		{"io_uring_setup", unix.SYS_IO_URING_SETUP}, {"io_uring_enter", unix.SYS_IO_URING_ENTER},
		{"io_uring_register", unix.SYS_IO_URING_REGISTER}, {"ioctl", unix.SYS_IOCTL},
		{"TIOCGETD", unix.TIOCGETD}, {"TIOCSETD", unix.TIOCSETD},
		{"fallocate", unix.SYS_FALLOCATE}, {"ptrace", unix.SYS_PTRACE},
		{"process_vm_readv", unix.SYS_PROCESS_VM_READV}, {"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV},
		{"pidfd_open", unix.SYS_PIDFD_OPEN}, {"pidfd_getfd", unix.SYS_PIDFD_GETFD},
	}
	var b strings.Builder
	for _, n := range nrs {
		fmt.Fprintf(&b, "%q: %d, ", n.name, n.nr)
	}
	return b.String()
}

// seccompSandboxWant is each result the script must print. Neighbours of
// every refused call still work; EOPNOTSUPP is named ENOTSUP.
var seccompSandboxWant = map[string]string{
	"socketpair_unix": "ok", "socket_inet": "ok", "socket_inet6": "ok", "socket_netlink": "ok",
	"socketpair_vsock": "EAFNOSUPPORT", "socket_vsock": "EAFNOSUPPORT", "socket_vsock_high": "EAFNOSUPPORT",
	"socket_packet": "EAFNOSUPPORT", "socket_bluetooth": "EAFNOSUPPORT", "socket_can": "EAFNOSUPPORT",
	"socket_tipc": "EAFNOSUPPORT", "socket_rds": "EAFNOSUPPORT", "socket_kcm": "EAFNOSUPPORT",
	"socket_alg": "EAFNOSUPPORT", "socket_xdp": "EAFNOSUPPORT",

	"io_uring_setup": "ENOSYS", "io_uring_enter": "ENOSYS", "io_uring_register": "ENOSYS",

	"ioctl_tiocgetd": "ok", "ioctl_tiocsetd": "EPERM", "ioctl_tiocsetd_high": "EPERM",

	"fallocate_plain": "ok", "fallocate_punch": "ok", "fallocate_zero": "ok", "fallocate_collapse": "ok",
	"fallocate_plain_past_limit": "EFBIG", // the kernel's own RLIMIT_FSIZE check
	"fallocate_keep":             "ENOTSUP", "fallocate_zero_keep": "ENOTSUP", "fallocate_insert": "ENOTSUP",
	"fallocate_unshare": "ENOTSUP", "fallocate_unknown": "ENOTSUP",

	"ptrace_attach_child": "ok", "ptrace_seize_child": "ok",
	"process_vm_readv_child": "ok", "process_vm_writev_child": "ok",
	"ptrace_attach_init": "EPERM", "ptrace_seize_init": "EPERM",
	"ptrace_attach_init_high": "EPERM", "ptrace_seize_init_high": "EPERM",
	"process_vm_readv_init": "EPERM", "process_vm_writev_init": "EPERM",
	"process_vm_readv_init_high": "EPERM", "process_vm_writev_init_high": "EPERM",
	"pidfd_open_child": "ok", "pidfd_open_init": "ok", "pidfd_getfd_child": "EPERM",
}

// TestSeccompInSandbox makes each refused call, and its allowed
// neighbours, from a program running in a real sandbox.
func TestSeccompInSandbox(t *testing.T) {
	t.Parallel()
	python := needPython(t)
	script := fmt.Sprintf(seccompSandboxScript, seccompSandboxNumbers())
	r := runPolicy(t, Policy{Command: []string{python, "-c", script}, Limits: Limits{FileSize: 1 << 20}, PTYs: 1})
	if !r.exit.Success() {
		t.Fatalf("script: %v", r)
	}
	got := map[string]string{}
	for _, line := range strings.Split(r.stdout, "\n") {
		if name, result, ok := strings.Cut(line, " "); ok {
			got[name] = result
		}
	}
	for _, name := range slices.Sorted(maps.Keys(seccompSandboxWant)) {
		if want := seccompSandboxWant[name]; got[name] != want {
			t.Errorf("%s = %q, want %s", name, got[name], want)
		}
	}
	// KEEP_SIZE refused: nothing was allocated past the 1 MiB ceiling.
	if kib, err := strconv.Atoi(got["falloc_blocks_kib"]); err != nil || kib > 1024 {
		t.Errorf("file allocated %q KiB under a 1 MiB ceiling", got["falloc_blocks_kib"])
	}
}

// TestSeccompCoversSandboxInit checks that bwrap's pid 1 runs under the
// filter too, so a process that took it over would gain no call the
// filter refuses; the pid 1 rules keep the command from taking it over.
func TestSeccompCoversSandboxInit(t *testing.T) {
	t.Parallel()
	r := runPolicy(t, Policy{Command: sh("grep '^Seccomp:' /proc/1/status"), Proc: ProcPrivate})
	if !r.exit.Success() || r.stdout != "Seccomp:\t2\n" {
		t.Errorf("pid 1: %v", r)
	}
}
