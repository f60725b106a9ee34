//go:build linux

package seccomp

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// abi describes the native ABI of one GOARCH.
type abi struct {
	audit uint32 // seccomp_data.arch of native system calls
	x32   bool   // the kernel also accepts x32 calls under the native arch
	// kexecFileLoad is spelled out because unix has no SYS_KEXEC_FILE_LOAD
	// on some linux ports (386, mips*), where this file must still compile.
	kexecFileLoad uint32
}

// denied is deniedCalls plus the calls whose numbers the table holds.
func (a abi) denied() []call {
	return append(slices.Clip(deniedCalls), call{"kexec_file_load", a.kexecFileLoad})
}

// abis lists the architectures the filter knows. Both are little
// endian, which argLow relies on.
var abis = map[string]abi{
	"amd64": {audit: unix.AUDIT_ARCH_X86_64, x32: true, kexecFileLoad: 320},
	"arm64": {audit: unix.AUDIT_ARCH_AARCH64, kexecFileLoad: 294},
}

// Offsets into struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}.
const (
	dataNr   = 0
	dataArch = 4
	dataArgs = 16
)

// argLow is the offset of the low 32 bits of args[i] on a little
// endian machine. The checked arguments (ioctl cmd, clone flags, socket
// family, fallocate mode, the pid of ptrace and process_vm_*) are
// truncated to 32 bits by the kernel, so the high word must not matter.
// ptrace's request is a long, so comparing its low word refuses a little
// more than the kernel would treat as ATTACH or SEIZE, never less.
func argLow(i int) uint32 { return dataArgs + 8*uint32(i) }

const (
	// x32SyscallBit marks x32 system calls on x86_64 (__X32_SYSCALL_BIT).
	x32SyscallBit = 0x40000000
	// skippedNr is the number a tracer writes to skip a call.
	skippedNr = 0xffffffff
	// bpfMaxInsns is the kernel's limit on a classic BPF program.
	bpfMaxInsns = 4096
)

// call is a system call by its name, as the kernel's syscall tables and
// libseccomp spell it, and its native number.
type call struct {
	name string
	nr   uint32
}

// deniedCalls are refused with EPERM whatever their arguments.
var deniedCalls = []call{
	// Kernel keyrings are not namespaced: a session could read or plant
	// keys shared with the host user.
	{"keyctl", unix.SYS_KEYCTL}, {"add_key", unix.SYS_ADD_KEY}, {"request_key", unix.SYS_REQUEST_KEY},
	// Large kernel attack surface with no use in a terminal session.
	{"bpf", unix.SYS_BPF}, {"perf_event_open", unix.SYS_PERF_EVENT_OPEN}, {"userfaultfd", unix.SYS_USERFAULTFD},
	// The mount table is bwrap's to build; changing it inside undoes the
	// policy (binds, read-only paths, masked procfs).
	{"mount", unix.SYS_MOUNT}, {"umount2", unix.SYS_UMOUNT2}, {"pivot_root", unix.SYS_PIVOT_ROOT},
	{"move_mount", unix.SYS_MOVE_MOUNT}, {"open_tree", unix.SYS_OPEN_TREE}, {"open_tree_attr", unix.SYS_OPEN_TREE_ATTR},
	{"fsopen", unix.SYS_FSOPEN}, {"fsconfig", unix.SYS_FSCONFIG}, {"fsmount", unix.SYS_FSMOUNT}, {"fspick", unix.SYS_FSPICK},
	{"mount_setattr", unix.SYS_MOUNT_SETATTR},
	// Replacing or extending the running kernel.
	// kexec_file_load is added per arch, see abi.
	{"kexec_load", unix.SYS_KEXEC_LOAD},
	{"init_module", unix.SYS_INIT_MODULE}, {"finit_module", unix.SYS_FINIT_MODULE}, {"delete_module", unix.SYS_DELETE_MODULE},
	// Opens files by handle, bypassing the path-based confinement.
	{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT},
	// New namespaces would give the process a fresh, fully capable user
	// namespace to attack the kernel from, or let it leave ours.
	{"unshare", unix.SYS_UNSHARE}, {"setns", unix.SYS_SETNS},
	// Copies a descriptor out of another process. The filter cannot see
	// which process a pidfd names, so it cannot spare the sandbox's own
	// children while refusing its init (see initPid), and few
	// programs a terminal runs use it.
	{"pidfd_getfd", unix.SYS_PIDFD_GETFD},
}

// noSysCalls are refused with ENOSYS, which callers read as "this kernel
// does not have it" and fall back from.
var noSysCalls = []call{
	// clone3 keeps its flags in memory, out of the filter's reach; libc
	// falls back to clone, whose flags the filter checks.
	{"clone3", unix.SYS_CLONE3},
	// io_uring runs operations (socket, fallocate, ...) without the system
	// calls this filter checks, and is a large attack surface of its own;
	// liburing and its users fall back to plain calls.
	{"io_uring_setup", unix.SYS_IO_URING_SETUP}, {"io_uring_enter", unix.SYS_IO_URING_ENTER},
	{"io_uring_register", unix.SYS_IO_URING_REGISTER},
}

// ttyInject are the ioctl commands that push input into a terminal
// that another process reads (TIOCSTI), drive a virtual console's
// selection buffer (TIOCLINUX), or switch a terminal to another line
// discipline (TIOCSETD): each loads kernel code (n_hdlc, slcan, ...) that
// a terminal session has no use for and that has a long record of bugs.
var ttyInject = []uint32{unix.TIOCSTI, unix.TIOCLINUX, unix.TIOCSETD}

// socketFamilies are the only address families socket(2) and
// socketpair(2) may use; any other is refused with EAFNOSUPPORT, as if the
// kernel lacked it. Network namespaces do not isolate the others: vsock in
// particular is one port space per machine, shared by every sandbox and
// reaching the hypervisor even with --network none.
var socketFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// fallocateModes are the fallocate modes that cannot take a file
// past RLIMIT_FSIZE; any other is refused with EOPNOTSUPP, the kernel's
// own answer to a mode a filesystem lacks, so callers fall back to write.
// The rule follows vfs_fallocate (fs/open.c, 6.x) and the filesystems it
// calls, which check the new size with inode_newsize_ok only when the
// mode may grow i_size:
//   - 0 (allocate) and ZERO_RANGE without KEEP_SIZE grow i_size, and the
//     new size is checked against RLIMIT_FSIZE (EFBIG, SIGXFSZ);
//   - COLLAPSE_RANGE shrinks the file (KEEP_SIZE with it is invalid);
//   - PUNCH_HOLE|KEEP_SIZE only frees space (PUNCH_HOLE needs KEEP_SIZE);
//   - KEEP_SIZE alone and ZERO_RANGE|KEEP_SIZE allocate past i_size, where
//     nothing checks RLIMIT_FSIZE: a file of size 0 can fill the disk;
//   - INSERT_RANGE grows i_size by shifting data, checked only against the
//     filesystem's maximum, never RLIMIT_FSIZE;
//   - UNSHARE_RANGE allocates new blocks for shared ones;
//   - WRITE_ZEROES (6.17) and unknown bits are refused too: a mode this
//     list has not been checked against is not let through.
//
// The mode is an int, so only the low word is compared.
var fallocateModes = []uint32{
	unix.FALLOC_FL_ALLOCATE_RANGE,
	unix.FALLOC_FL_ZERO_RANGE,
	unix.FALLOC_FL_COLLAPSE_RANGE,
	unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE,
}

// initPid is the sandbox's init (bwrap's reaper) as its processes
// see it: unshare and setns are refused, so the caller's pid namespace is
// always the sandbox's. The init is bwrap's: it reports the command's exit
// status to termgate and is the sandbox's lifetime. A process that
// attached to it or wrote its memory could stop it (the sandbox would hang
// until its timeout) or forge the status the execution reports.
const initPid = 1

// cloneNamespaces are the clone flags that create namespaces.
// CLONE_NEWTIME is missing on purpose: it is 0x80, which clone(2) reads as
// part of the exit signal (CSIGNAL); only clone3 and unshare can create a
// time namespace, and both are refused.
const cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID |
	unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// Verdicts.
const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	retKill   = unix.SECCOMP_RET_KILL_PROCESS
	// EAFNOSUPPORT: the family does not exist, as far as the caller knows.
	retEAFNOSUPPORT = unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)
	// EOPNOTSUPP: the filesystem does not support this fallocate mode.
	retEOPNOTSUPP = unix.SECCOMP_RET_ERRNO | uint32(unix.EOPNOTSUPP)
)

// Program returns the default filter as raw sock_filter bytes
// (native endian, 8 bytes per instruction), ready for bwrap --seccomp. It
// returns nil on an architecture the filter does not know; bwrap refuses an
// empty program, so a launch with it fails rather than running unfiltered.
// The result is a fresh copy the caller may keep or modify.
func Program() []byte { return slices.Clone(defaultProgram()) }

// defaultProgram builds the filter once: it depends only on GOARCH.
var defaultProgram = sync.OnceValue(func() []byte {
	arch, ok := abis[runtime.GOARCH]
	if !ok {
		return nil
	}
	insns, err := filter(arch).assemble()
	if err != nil {
		panic(fmt.Sprintf("seccomp: default filter: %v", err))
	}
	return encodeBPF(insns)
})

// filter writes the default filter. Every check jumps forward to
// the shared blocks at the end, so all jumps stay short.
func filter(arch abi) *bpfBuilder {
	b := newBPFBuilder()
	// A foreign ABI (i386 int 0x80 on x86_64, AArch32 on arm64) numbers
	// system calls differently, so nothing below would mean anything.
	b.load(dataArch)
	b.jump(unix.BPF_JEQ, arch.audit, "", "kill")
	b.load(dataNr)
	if arch.x32 {
		denyX32(b)
	}
	dispatch(b, arch.rules())
	checkIoctl(b)
	checkClone(b)
	checkSocket(b)
	checkFallocate(b)
	checkPtrace(b)
	verdicts(b)
	return b
}

// rule sends one system call number to the block that decides it.
type rule struct {
	nr    uint32
	label string
}

// rules lists every number the filter does not simply allow.
func (a abi) rules() []rule {
	rules := []rule{
		{unix.SYS_IOCTL, "ioctl"}, {unix.SYS_CLONE, "clone"},
		{unix.SYS_SOCKET, "socket"}, {unix.SYS_SOCKETPAIR, "socket"},
		{unix.SYS_FALLOCATE, "fallocate"}, {unix.SYS_PTRACE, "ptrace"},
		{unix.SYS_PROCESS_VM_READV, "process_vm"}, {unix.SYS_PROCESS_VM_WRITEV, "process_vm"},
	}
	for _, c := range noSysCalls {
		rules = append(rules, rule{c.nr, "enosys"})
	}
	for _, c := range a.denied() {
		rules = append(rules, rule{c.nr, "eperm"})
	}
	return rules
}

// leafRules is the most rules a search leaf compares one by one.
const leafRules = 4

// dispatch routes A, a system call number, to its rule's block by a
// binary search, and allows every number without a rule. A chain of one
// comparison per rule would be shorter, but the kernel runs the filter
// for every number each time it installs it, to cache the calls it
// always allows (seccomp_cache_prepare): the search halves that cost of
// every sandbox start (BenchmarkLoad), and of every call the cache
// cannot answer. A number with two rules is an error: order would
// silently decide between them.
func dispatch(b *bpfBuilder, rules []rule) {
	slices.SortFunc(rules, func(x, y rule) int { return cmp.Compare(x.nr, y.nr) })
	for i := 1; i < len(rules); i++ {
		if rules[i].nr == rules[i-1].nr && b.err == nil {
			b.err = fmt.Errorf("bpf: system call %d has two rules", rules[i].nr)
		}
	}
	search(b, rules)
}

// search emits the subtree for rules, sorted by number.
func search(b *bpfBuilder, rules []rule) {
	if len(rules) <= leafRules {
		for _, r := range rules {
			b.jump(unix.BPF_JEQ, r.nr, r.label, "")
		}
		b.ret(retAllow)
		return
	}
	mid := rules[len(rules)/2].nr
	upper := fmt.Sprintf("nr>=%d", mid)
	b.jump(unix.BPF_JGE, mid, upper, "")
	search(b, rules[:len(rules)/2])
	b.label(upper)
	search(b, rules[len(rules)/2:])
}

// denyX32 refuses x32 calls: they reach the same kernel entry points
// under other numbers, so a list of native numbers would not cover them.
func denyX32(b *bpfBuilder) {
	// A tracer skips a call by setting its number to -1; the kernel runs
	// nothing for it, and an errno here would overwrite the return value
	// the tracer chose.
	b.jump(unix.BPF_JEQ, skippedNr, "allow", "")
	b.jump(unix.BPF_JGE, x32SyscallBit, "enosys", "")
}

// checkIoctl refuses terminal input injection. Only the low word of cmd
// is loaded because the kernel truncates cmd to unsigned int: comparing 64
// bits would let 0x100005412 through as TIOCSTI.
func checkIoctl(b *bpfBuilder) {
	b.label("ioctl")
	b.load(argLow(1))
	for _, cmd := range ttyInject {
		b.jump(unix.BPF_JEQ, cmd, "eperm", "")
	}
	b.ret(retAllow)
}

// checkSocket lets socket and socketpair create only the families in
// socketFamilies (args[0], an int).
func checkSocket(b *bpfBuilder) {
	b.label("socket")
	b.load(argLow(0))
	for _, af := range socketFamilies {
		b.jump(unix.BPF_JEQ, af, "allow", "")
	}
	b.ret(retEAFNOSUPPORT)
}

// checkFallocate lets through only the modes in fallocateModes
// (args[1], an int).
func checkFallocate(b *bpfBuilder) {
	b.label("fallocate")
	b.load(argLow(1))
	for _, mode := range fallocateModes {
		b.jump(unix.BPF_JEQ, mode, "allow", "")
	}
	b.ret(retEOPNOTSUPP)
}

// checkPtrace refuses PTRACE_ATTACH and PTRACE_SEIZE of the sandbox's
// init (pid in args[1]) and process_vm_readv/writev of it (pid in
// args[0]). Other requests need an attached tracee, so they cannot reach
// the init either; every other process stays open to debuggers.
func checkPtrace(b *bpfBuilder) {
	b.label("ptrace")
	b.load(argLow(0))
	b.jump(unix.BPF_JEQ, unix.PTRACE_ATTACH, "ptrace_pid", "")
	b.jump(unix.BPF_JEQ, unix.PTRACE_SEIZE, "ptrace_pid", "")
	b.ret(retAllow)
	b.label("ptrace_pid")
	b.load(argLow(1))
	b.jump(unix.BPF_JEQ, initPid, "eperm", "allow")
	b.label("process_vm")
	b.load(argLow(0))
	b.jump(unix.BPF_JEQ, initPid, "eperm", "allow")
}

// checkClone refuses clone calls that create namespaces and lets threads
// and forks through. The kernel reads only the low 32 bits of the flags.
func checkClone(b *bpfBuilder) {
	b.label("clone")
	b.load(argLow(0))
	b.jump(unix.BPF_JSET, cloneNamespaces, "eperm", "")
	b.ret(retAllow)
}

// verdicts are the shared return blocks the checks jump to.
func verdicts(b *bpfBuilder) {
	b.label("allow")
	b.ret(retAllow)
	b.label("eperm")
	b.ret(retEPERM)
	b.label("enosys")
	b.ret(retENOSYS)
	// Kill the whole process, not the thread: a half-killed multithreaded
	// program is harder to reason about than a dead one.
	b.label("kill")
	b.ret(retKill)
}

// bpfBuilder assembles a classic BPF program whose jumps name labels, so
// the program reads top to bottom and offsets are computed once, at the
// end. Only forward jumps within the 8-bit jt/jf range are accepted: a
// program that needs more is a program to restructure, not to patch.
type bpfBuilder struct {
	insns  []bpfInsn
	labels map[string]int
	err    error
}

// bpfInsn is an instruction with its jump targets still symbolic; an empty
// target means the next instruction.
type bpfInsn struct {
	unix.SockFilter
	jt, jf string
}

func newBPFBuilder() *bpfBuilder {
	return &bpfBuilder{labels: map[string]int{}}
}

// load sets A to the 32-bit word at off in seccomp_data.
func (b *bpfBuilder) load(off uint32) {
	b.emit(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, off, "", "")
}

// jump compares A with k using op (BPF_JEQ, BPF_JGE, BPF_JSET).
func (b *bpfBuilder) jump(op uint16, k uint32, jt, jf string) {
	b.emit(unix.BPF_JMP|op|unix.BPF_K, k, jt, jf)
}

// ret ends the program with verdict k.
func (b *bpfBuilder) ret(k uint32) { b.emit(unix.BPF_RET|unix.BPF_K, k, "", "") }

func (b *bpfBuilder) emit(code uint16, k uint32, jt, jf string) {
	insn := bpfInsn{SockFilter: unix.SockFilter{Code: code, K: k}, jt: jt, jf: jf}
	b.insns = append(b.insns, insn)
}

// label names the next instruction.
func (b *bpfBuilder) label(name string) {
	if _, dup := b.labels[name]; dup && b.err == nil {
		b.err = fmt.Errorf("bpf: label %q defined twice", name)
	}
	b.labels[name] = len(b.insns)
}

// assemble resolves the labels into relative jump offsets.
func (b *bpfBuilder) assemble() ([]unix.SockFilter, error) {
	if b.err != nil {
		return nil, b.err
	}
	if len(b.insns) == 0 || len(b.insns) > bpfMaxInsns {
		return nil, fmt.Errorf("bpf: %d instructions, want 1 to %d", len(b.insns), bpfMaxInsns)
	}
	out := make([]unix.SockFilter, len(b.insns))
	for i, insn := range b.insns {
		jt, err := b.offset(i, insn.jt)
		if err != nil {
			return nil, err
		}
		jf, err := b.offset(i, insn.jf)
		if err != nil {
			return nil, err
		}
		out[i] = insn.SockFilter
		out[i].Jt, out[i].Jf = jt, jf
	}
	return out, nil
}

// offset is the distance from the instruction after pc to label.
func (b *bpfBuilder) offset(pc int, label string) (uint8, error) {
	if label == "" {
		return 0, nil
	}
	target, ok := b.labels[label]
	if !ok {
		return 0, fmt.Errorf("bpf: undefined label %q", label)
	}
	d := target - pc - 1
	if d < 0 || d > 255 || target >= len(b.insns) {
		return 0, fmt.Errorf("bpf: jump from %d to %q (%d) out of range", pc, label, target)
	}
	return uint8(d), nil
}

// encodeBPF lays the program out as the kernel's struct sock_filter array:
// u16 code, u8 jt, u8 jf, u32 k, in native byte order.
func encodeBPF(insns []unix.SockFilter) []byte {
	out := make([]byte, 0, 8*len(insns))
	for _, in := range insns {
		out = binary.NativeEndian.AppendUint16(out, in.Code)
		out = append(out, in.Jt, in.Jf)
		out = binary.NativeEndian.AppendUint32(out, in.K)
	}
	return out
}
