//go:build linux && (amd64 || arm64)

package seccomp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

// callInput is struct seccomp_data without ip, which the filter ignores.
type callInput struct {
	nr   uint32
	arch uint32
	args [6]uint64
}

// encode lays the input out as the kernel does, in native byte order.
func (in callInput) encode() []byte {
	b := binary.NativeEndian.AppendUint32(nil, in.nr)
	b = binary.NativeEndian.AppendUint32(b, in.arch)
	b = binary.NativeEndian.AppendUint64(b, 0) // ip
	for _, a := range in.args {
		b = binary.NativeEndian.AppendUint64(b, a)
	}
	return b
}

// decodeBPF parses raw sock_filter bytes back into instructions.
func decodeBPF(t testing.TB, raw []byte) []unix.SockFilter {
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
	v, _, err := traceBPF(prog, data)
	return v, err
}

// traceBPF is runBPF that also counts the instructions run before the
// verdict or the first load of an argument: the path the kernel walks for
// the number alone when it caches the calls a filter always allows.
func traceBPF(prog []unix.SockFilter, data []byte) (verdict uint32, steps int, err error) {
	var a uint32
	argsLoaded := false
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		if !argsLoaded {
			steps++
		}
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			if in.K%4 != 0 || int(in.K)+4 > len(data) {
				return 0, steps, fmt.Errorf("pc %d: load at bad offset %d", pc, in.K)
			}
			a = binary.NativeEndian.Uint32(data[in.K:])
			argsLoaded = argsLoaded || in.K >= dataArgs
		case unix.BPF_JMP | unix.BPF_JA:
			pc += int(in.K)
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			pc += bpfBranch(in, a == in.K)
		case unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
			pc += bpfBranch(in, a >= in.K)
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			pc += bpfBranch(in, a&in.K != 0)
		case unix.BPF_RET | unix.BPF_K:
			return in.K, steps, nil
		default:
			return 0, steps, fmt.Errorf("pc %d: opcode %#x not supported", pc, in.Code)
		}
	}
	return 0, steps, fmt.Errorf("fell off the end of a %d-instruction program", len(prog))
}

func bpfBranch(in unix.SockFilter, taken bool) int {
	if taken {
		return int(in.Jt)
	}
	return int(in.Jf)
}

func verdictName(v uint32) string {
	switch {
	case v == retAllow:
		return "allow"
	case v == retKill:
		return "kill"
	case v&unix.SECCOMP_RET_ACTION_FULL == unix.SECCOMP_RET_ERRNO:
		return unix.ErrnoName(unix.Errno(v & unix.SECCOMP_RET_DATA))
	}
	return fmt.Sprintf("%#x", v)
}

// wantDenied restates the policy independently of deniedCalls.
var wantDenied = map[string]uint32{
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

// errnoVerdict is the verdict that fails a call with e, restated here so
// the tests do not lean on the filter's own constants.
func errnoVerdict(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }

type verdictCase struct {
	name string
	in   callInput
	want uint32
}

func verdictCases() []verdictCase {
	native := abis[runtime.GOARCH].audit
	call := func(nr uint32, args ...uint64) callInput {
		in := callInput{nr: nr, arch: native}
		copy(in.args[:], args)
		return in
	}
	const thread = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
		unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS |
		unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID
	cases := []verdictCase{
		{"ioctl TIOCSTI", call(unix.SYS_IOCTL, 0, unix.TIOCSTI), retEPERM},
		// The kernel truncates cmd to 32 bits: this is TIOCSTI too.
		{"ioctl TIOCSTI high bits", call(unix.SYS_IOCTL, 0, 0x1_0000_5412), retEPERM},
		{"ioctl TIOCSTI all high bits", call(unix.SYS_IOCTL, 0, 0xffff_ffff_0000_5412), retEPERM},
		{"ioctl TIOCLINUX", call(unix.SYS_IOCTL, 3, unix.TIOCLINUX), retEPERM},
		{"ioctl TCGETS", call(unix.SYS_IOCTL, 0, unix.TCGETS), retAllow},
		{"ioctl TIOCSWINSZ", call(unix.SYS_IOCTL, 0, unix.TIOCSWINSZ), retAllow},
		{"write with TIOCSTI as an argument", call(unix.SYS_WRITE, 1, unix.TIOCSTI), retAllow},
		{"clone3", call(unix.SYS_CLONE3), retENOSYS},
		{"clone thread", call(unix.SYS_CLONE, thread), retAllow},
		{"clone fork", call(unix.SYS_CLONE, uint64(unix.SIGCHLD)), retAllow},
		// Bits above 31 never reach the kernel's clone flags.
		{"clone newuser in high word", call(unix.SYS_CLONE, unix.CLONE_NEWUSER<<32|uint64(unix.SIGCHLD)), retAllow},
		{"foreign arch i386", callInput{nr: unix.SYS_GETPID, arch: unix.AUDIT_ARCH_I386}, retKill},
		{"foreign arch arm", callInput{nr: unix.SYS_GETPID, arch: unix.AUDIT_ARCH_ARM}, retKill},
		{"foreign arch zero", callInput{nr: unix.SYS_GETPID}, retKill},
		{"unknown syscall", call(1000), retAllow},
	}
	for _, nr := range []uint32{unix.SYS_READ, unix.SYS_WRITE, unix.SYS_PTRACE, unix.SYS_EXECVE, unix.SYS_GETPID} {
		cases = append(cases, verdictCase{fmt.Sprintf("syscall %d", nr), call(nr), retAllow})
	}
	for name, nr := range wantDenied {
		cases = append(cases, verdictCase{name, call(nr), retEPERM})
	}
	for _, flag := range []uint64{unix.CLONE_NEWNS, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC,
		unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET, unix.CLONE_NEWCGROUP} {
		in := call(unix.SYS_CLONE, flag|uint64(unix.SIGCHLD))
		cases = append(cases, verdictCase{fmt.Sprintf("clone %#x", flag), in, retEPERM})
	}
	cases = append(cases, socketCases(call)...)
	cases = append(cases, fallocateCases(call)...)
	cases = append(cases, ptraceCases(call)...)
	return append(cases, archCases(call)...)
}

// socketCases: only the families a sandbox needs can be created.
// The kernel reads the family as an int, so the high word is ignored.
func socketCases(call func(uint32, ...uint64) callInput) []verdictCase {
	var cases []verdictCase
	for _, nr := range []uint32{unix.SYS_SOCKET, unix.SYS_SOCKETPAIR} {
		for _, af := range []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK, 1<<32 | unix.AF_UNIX} {
			cases = append(cases, verdictCase{fmt.Sprintf("socket %d family %#x", nr, af), call(nr, af, unix.SOCK_STREAM), retAllow})
		}
		for _, af := range []uint64{unix.AF_VSOCK, 1<<32 | unix.AF_VSOCK, 0xffff_ffff_0000_0000 | unix.AF_VSOCK,
			unix.AF_UNSPEC, unix.AF_BLUETOOTH, unix.AF_CAN, unix.AF_TIPC, unix.AF_RDS, unix.AF_KCM,
			unix.AF_PACKET, unix.AF_ALG, unix.AF_XDP, unix.AF_KEY, unix.AF_MAX, 0xffff_ffff} {
			cases = append(cases, verdictCase{fmt.Sprintf("socket %d family %#x", nr, af), call(nr, af, unix.SOCK_STREAM), errnoVerdict(unix.EAFNOSUPPORT)})
		}
	}
	for _, nr := range []uint32{unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER} {
		cases = append(cases, verdictCase{fmt.Sprintf("io_uring %d", nr), call(nr), retENOSYS})
	}
	return append(cases,
		verdictCase{"ioctl TIOCSETD", call(unix.SYS_IOCTL, 0, unix.TIOCSETD), retEPERM},
		verdictCase{"ioctl TIOCSETD high bits", call(unix.SYS_IOCTL, 0, 1<<32|unix.TIOCSETD), retEPERM},
		verdictCase{"ioctl TIOCGETD", call(unix.SYS_IOCTL, 0, unix.TIOCGETD), retAllow},
	)
}

// fallocateCases: only the modes the kernel checks against
// RLIMIT_FSIZE, or that cannot grow a file, are let through.
func fallocateCases(call func(uint32, ...uint64) callInput) []verdictCase {
	var cases []verdictCase
	for _, mode := range []uint64{0, unix.FALLOC_FL_ZERO_RANGE, unix.FALLOC_FL_COLLAPSE_RANGE,
		unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE, 1 << 32} {
		cases = append(cases, verdictCase{fmt.Sprintf("fallocate %#x", mode), call(unix.SYS_FALLOCATE, 3, mode, 0, 1), retAllow})
	}
	for _, mode := range []uint64{unix.FALLOC_FL_KEEP_SIZE, 1<<32 | unix.FALLOC_FL_KEEP_SIZE,
		unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_INSERT_RANGE,
		unix.FALLOC_FL_UNSHARE_RANGE, unix.FALLOC_FL_UNSHARE_RANGE | unix.FALLOC_FL_KEEP_SIZE,
		unix.FALLOC_FL_PUNCH_HOLE, unix.FALLOC_FL_COLLAPSE_RANGE | unix.FALLOC_FL_KEEP_SIZE,
		unix.FALLOC_FL_NO_HIDE_STALE, unix.FALLOC_FL_WRITE_ZEROES, 0x100, 0x8000_0000, 0xffff_ffff} {
		cases = append(cases, verdictCase{fmt.Sprintf("fallocate %#x", mode), call(unix.SYS_FALLOCATE, 3, mode, 0, 1), errnoVerdict(unix.EOPNOTSUPP)})
	}
	return cases
}

// ptraceCases: the sandbox's init cannot be attached to or have its
// memory read or written; its other processes can. The kernel reads the
// pid as a pid_t, so the high word is ignored.
func ptraceCases(call func(uint32, ...uint64) callInput) []verdictCase {
	cases := []verdictCase{
		{"pidfd_open init", call(unix.SYS_PIDFD_OPEN, 1), retAllow},
		{"kill init", call(unix.SYS_KILL, 1, uint64(unix.SIGTERM)), retAllow},
	}
	for _, pid := range []uint64{1, 1<<32 | 1, 0xffff_ffff_0000_0001} {
		for _, req := range []uint64{unix.PTRACE_ATTACH, unix.PTRACE_SEIZE} {
			cases = append(cases, verdictCase{fmt.Sprintf("ptrace %#x pid %#x", req, pid), call(unix.SYS_PTRACE, req, pid), retEPERM})
		}
		for _, nr := range []uint32{unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV} {
			cases = append(cases, verdictCase{fmt.Sprintf("process_vm %d pid %#x", nr, pid), call(nr, pid), retEPERM})
		}
	}
	for _, pid := range []uint64{0, 2, 3, 0xffff_ffff, 1 << 32} {
		for _, req := range []uint64{unix.PTRACE_ATTACH, unix.PTRACE_SEIZE} {
			cases = append(cases, verdictCase{fmt.Sprintf("ptrace %#x pid %#x", req, pid), call(unix.SYS_PTRACE, req, pid), retAllow})
		}
		for _, nr := range []uint32{unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV} {
			cases = append(cases, verdictCase{fmt.Sprintf("process_vm %d pid %#x", nr, pid), call(nr, pid), retAllow})
		}
	}
	for _, req := range []uint64{unix.PTRACE_TRACEME, unix.PTRACE_PEEKDATA, unix.PTRACE_INTERRUPT, unix.PTRACE_DETACH} {
		cases = append(cases, verdictCase{fmt.Sprintf("ptrace %#x pid 1", req), call(unix.SYS_PTRACE, req, 1), retAllow})
	}
	return cases
}

// archCases covers the x32 ABI, which only x86_64 has.
func archCases(call func(uint32, ...uint64) callInput) []verdictCase {
	if runtime.GOARCH != "amd64" {
		return []verdictCase{{"x32 bit means nothing here", call(x32SyscallBit | 39), retAllow}}
	}
	return []verdictCase{
		{"x32 getpid", call(x32SyscallBit | 39), retENOSYS},
		{"x32 keyctl", call(x32SyscallBit | 250), retENOSYS},
		{"x32 top", call(0xfffffffe), retENOSYS},
		{"skipped by a tracer", call(skippedNr), retAllow},
	}
}

func TestVerdicts(t *testing.T) {
	t.Parallel()
	prog := decodeBPF(t, Program())
	for _, tt := range verdictCases() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := runBPF(prog, tt.in.encode())
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("verdict %s, want %s", verdictName(got), verdictName(tt.want))
			}
		})
	}
}

func TestProgramShape(t *testing.T) {
	t.Parallel()
	raw := Program()
	if len(raw)%8 != 0 || len(raw)/8 >= bpfMaxInsns {
		t.Fatalf("program is %d bytes (%d instructions)", len(raw), len(raw)/8)
	}
	t.Logf("%d instructions", len(raw)/8)
	raw[0] ^= 0xff
	if again := Program(); again[0] == raw[0] {
		t.Error("Program shares its bytes with the caller")
	}
}

func TestBuilderErrors(t *testing.T) {
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

// childEnv makes TestKernel act as the probing child.
const childEnv = "TERMGATE_SECCOMP_CHILD"

// How a probe's result without any filter relates to its result under it.
type bareResult int

const (
	bareSame  bareResult = iota // the filter lets the call through
	bareOther                   // only the filter produces the result
	bareAny                     // the host may refuse the call by itself
)

type kernelProbe struct {
	name string
	call func() unix.Errno
	want string // result under the filter
	bare bareResult
}

func syscallProbe(nr uintptr, args ...uintptr) func() unix.Errno {
	return func() unix.Errno {
		var a [6]uintptr
		copy(a[:], args)
		_, _, errno := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
		return errno
	}
}

// kernelProbes are real calls whose results tell the filter's verdict
// apart from the kernel's own answer: each argument set makes the kernel
// fail with something other than EPERM or ENOSYS when nothing filters it
// (ENOTTY on /dev/null, EINVAL for impossible clone flags, ...), so no
// probe creates a namespace, a key or a process.
func kernelProbes(devNull uintptr) []kernelProbe {
	const userFS = unix.CLONE_NEWUSER | unix.CLONE_FS // always EINVAL
	probes := []kernelProbe{
		{"ioctl_tiocsti", syscallProbe(unix.SYS_IOCTL, devNull, unix.TIOCSTI), "EPERM", bareOther},
		{"ioctl_tiocsti_high", syscallProbe(unix.SYS_IOCTL, devNull, 0x1_0000_5412), "EPERM", bareOther},
		{"ioctl_tioclinux", syscallProbe(unix.SYS_IOCTL, devNull, unix.TIOCLINUX), "EPERM", bareOther},
		{"ioctl_tcgets", syscallProbe(unix.SYS_IOCTL, devNull, unix.TCGETS), "ENOTTY", bareSame},
		// A multithreaded process may not enter a new user namespace.
		{"unshare_newuser", syscallProbe(unix.SYS_UNSHARE, unix.CLONE_NEWUSER), "EPERM", bareOther},
		{"clone_newuser", syscallProbe(unix.SYS_CLONE, userFS), "EPERM", bareOther},
		// CLONE_THREAD without CLONE_SIGHAND is EINVAL: it proves the call
		// reached the kernel without creating anything.
		{"clone_thread", syscallProbe(unix.SYS_CLONE, unix.CLONE_THREAD), "EINVAL", bareSame},
		{"clone_thread_high_newuser", syscallProbe(unix.SYS_CLONE, unix.CLONE_NEWUSER<<32|unix.CLONE_THREAD), "EINVAL", bareSame},
		{"clone3", syscallProbe(unix.SYS_CLONE3, 0, 0), "ENOSYS", bareOther},
		{"keyctl", syscallProbe(unix.SYS_KEYCTL, 0xffff), "EPERM", bareOther},
		{"bpf", syscallProbe(unix.SYS_BPF, 0xffff, 0, 0), "EPERM", bareAny},
		{"mount", syscallProbe(unix.SYS_MOUNT, 0, 0, 0, 0, 0), "EPERM", bareAny},
		{"getpid", probeGetpid, "ok", bareSame},
		// Not our tracee: ESRCH shows ptrace itself stays allowed.
		{"ptrace", syscallProbe(unix.SYS_PTRACE, unix.PTRACE_PEEKDATA, uintptr(os.Getpid())), "ESRCH", bareSame},
	}
	probes = append(probes, newKernelProbes(devNull)...)
	if runtime.GOARCH == "amd64" {
		x32 := kernelProbe{"x32_getpid", syscallProbe(x32SyscallBit | 39), "ENOSYS", bareAny}
		probes = append(probes, x32)
	}
	return probes
}

// badSocketType is a socket type the kernel refuses with EINVAL
// before it looks at the family, so no socket probe creates a socket.
const badSocketType = 0x100

// newKernelProbes cover the socket families, io_uring, TIOCSETD,
// fallocate modes, pidfd_getfd and ptrace of pid 1. Each argument set fails
// in the kernel before anything is created or attached to: a bad socket
// type, fd -1, a NULL io_uring_params, PTRACE_SEIZE with a nonzero addr
// (EIO), process_vm_readv with unknown flags (EINVAL). EOPNOTSUPP is
// spelled ENOTSUP, its other name on Linux.
func newKernelProbes(devNull uintptr) []kernelProbe {
	const bad = ^uintptr(0) // fd -1
	fall := func(mode uintptr) func() unix.Errno { return syscallProbe(unix.SYS_FALLOCATE, bad, mode, 0, 1) }
	sock := func(nr, af uintptr) func() unix.Errno { return syscallProbe(nr, af, badSocketType, 0, 0) }
	return []kernelProbe{
		{"socket_vsock", sock(unix.SYS_SOCKET, unix.AF_VSOCK), "EAFNOSUPPORT", bareOther},
		{"socket_vsock_high", sock(unix.SYS_SOCKET, 1<<32|unix.AF_VSOCK), "EAFNOSUPPORT", bareOther},
		{"socketpair_vsock", sock(unix.SYS_SOCKETPAIR, unix.AF_VSOCK), "EAFNOSUPPORT", bareOther},
		{"socket_packet", sock(unix.SYS_SOCKET, unix.AF_PACKET), "EAFNOSUPPORT", bareOther},
		{"socket_alg", sock(unix.SYS_SOCKET, unix.AF_ALG), "EAFNOSUPPORT", bareOther},
		{"socket_unix", sock(unix.SYS_SOCKET, unix.AF_UNIX), "EINVAL", bareSame},
		{"socketpair_unix", sock(unix.SYS_SOCKETPAIR, unix.AF_UNIX), "EINVAL", bareSame},
		{"socket_inet", sock(unix.SYS_SOCKET, unix.AF_INET), "EINVAL", bareSame},
		{"socket_inet6", sock(unix.SYS_SOCKET, unix.AF_INET6), "EINVAL", bareSame},
		{"socket_netlink", sock(unix.SYS_SOCKET, unix.AF_NETLINK), "EINVAL", bareSame},
		// Without the filter: EFAULT, EBADF, or EPERM/ENOSYS where the
		// host disabled io_uring.
		{"io_uring_setup", syscallProbe(unix.SYS_IO_URING_SETUP, 1, 0), "ENOSYS", bareAny},
		{"io_uring_enter", syscallProbe(unix.SYS_IO_URING_ENTER, bad), "ENOSYS", bareAny},
		{"io_uring_register", syscallProbe(unix.SYS_IO_URING_REGISTER, bad), "ENOSYS", bareAny},
		{"ioctl_tiocsetd", syscallProbe(unix.SYS_IOCTL, devNull, unix.TIOCSETD), "EPERM", bareOther},
		{"ioctl_tiocsetd_high", syscallProbe(unix.SYS_IOCTL, devNull, 1<<32|unix.TIOCSETD), "EPERM", bareOther},
		{"fallocate_plain", fall(0), "EBADF", bareSame},
		{"fallocate_zero", fall(unix.FALLOC_FL_ZERO_RANGE), "EBADF", bareSame},
		{"fallocate_collapse", fall(unix.FALLOC_FL_COLLAPSE_RANGE), "EBADF", bareSame},
		{"fallocate_punch", fall(unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE), "EBADF", bareSame},
		{"fallocate_keep", fall(unix.FALLOC_FL_KEEP_SIZE), "ENOTSUP", bareOther},
		{"fallocate_keep_high", fall(1<<32 | unix.FALLOC_FL_KEEP_SIZE), "ENOTSUP", bareOther},
		{"fallocate_zero_keep", fall(unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE), "ENOTSUP", bareOther},
		{"fallocate_insert", fall(unix.FALLOC_FL_INSERT_RANGE), "ENOTSUP", bareOther},
		{"fallocate_unshare", fall(unix.FALLOC_FL_UNSHARE_RANGE), "ENOTSUP", bareOther},
		{"pidfd_getfd", syscallProbe(unix.SYS_PIDFD_GETFD, bad, 0, 0), "EPERM", bareOther},
		{"ptrace_seize_init", syscallProbe(unix.SYS_PTRACE, unix.PTRACE_SEIZE, 1, 1), "EPERM", bareOther},
		{"ptrace_seize_init_high", syscallProbe(unix.SYS_PTRACE, unix.PTRACE_SEIZE, 1<<32|1, 1), "EPERM", bareOther},
		{"process_vm_readv_init", syscallProbe(unix.SYS_PROCESS_VM_READV, 1, 0, 0, 0, 0, 1), "EPERM", bareOther},
		{"process_vm_writev_init", syscallProbe(unix.SYS_PROCESS_VM_WRITEV, 1, 0, 0, 0, 0, 1), "EPERM", bareOther},
		{"process_vm_readv_self", syscallProbe(unix.SYS_PROCESS_VM_READV, uintptr(os.Getpid()), 0, 0, 0, 0, 1), "EINVAL", bareSame},
	}
}

func probeGetpid() unix.Errno {
	pid, _, errno := unix.Syscall(unix.SYS_GETPID, 0, 0, 0)
	if errno == 0 && int(pid) != os.Getpid() {
		return unix.EBADE // any errno no probe expects
	}
	return errno
}

func errnoName(e unix.Errno) string {
	if e == 0 {
		return "ok"
	}
	if name := unix.ErrnoName(e); name != "" {
		return name
	}
	return fmt.Sprintf("errno%d", int(e))
}

// runChild runs the probes and prints one "probe NAME RESULT" line
// each. In mode "load" it first installs the filter on every thread.
func runChild(t *testing.T, mode string) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	devNull, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	if mode == "load" {
		loadFilter(t, decodeBPF(t, Program()))
	}
	for _, p := range kernelProbes(devNull.Fd()) {
		fmt.Printf("probe %s %s\n", p.name, errnoName(p.call()))
	}
}

// loadFilter installs prog on every thread of the process (TSYNC), as
// bwrap does for the sandboxed command.
func loadFilter(t *testing.T, prog []unix.SockFilter) {
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

// childCommand returns the command that runs the probes in mode, started
// through wrapper (e.g. bwrap and its options) when one is given.
func childCommand(t *testing.T, mode string, wrapper ...string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := slices.Concat(wrapper, []string{exe, "-test.run=^TestKernel$"})
	cmd := exec.CommandContext(t.Context(), args[0], args[1:]...)
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	return cmd
}

// childResults runs cmd and parses the probe lines it prints.
func childResults(t *testing.T, cmd *exec.Cmd) map[string]string {
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

// checkChildResults compares probe results from a filtered child, or
// from an unfiltered one, which shows the probes can tell the difference.
func checkChildResults(t *testing.T, got map[string]string, filtered bool) {
	for _, p := range kernelProbes(0) {
		r, ok := got[p.name]
		switch {
		case !ok:
			t.Errorf("%s: no result", p.name)
		case filtered || p.bare == bareSame:
			if r != p.want {
				t.Errorf("%s = %s, want %s (filtered %v)", p.name, r, p.want, filtered)
			}
		case p.bare == bareOther && r == p.want:
			t.Errorf("%s = %s without a filter: the probe cannot see the filter", p.name, r)
		}
	}
}

func TestKernel(t *testing.T) {
	if mode := os.Getenv(childEnv); mode != "" {
		runChild(t, mode)
		return
	}
	t.Parallel()
	for _, tt := range []struct {
		mode     string
		filtered bool
	}{{"probe", false}, {"load", true}} {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			got := childResults(t, childCommand(t, tt.mode))
			checkChildResults(t, got, tt.filtered)
		})
	}
}

// TestBwrap hands the program to bwrap exactly as the launcher
// does, which checks the byte layout bwrap expects.
func TestBwrap(t *testing.T) {
	t.Parallel()
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		sandboxtest.Unavailable(t, "bwrap not found: %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := w.Write(Program()); err != nil {
		t.Fatal(err)
	}
	w.Close()
	cmd := childCommand(t, "probe", bwrap, "--ro-bind", "/", "/", "--dev", "/dev",
		"--proc", "/proc", "--unshare-all", "--die-with-parent", "--seccomp", "3", "--")
	cmd.ExtraFiles = []*os.File{r} // fd 3
	checkChildResults(t, childResults(t, cmd), true)
}
