//go:build linux && (amd64 || arm64)

package sandbox

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
	"unshare": unix.SYS_UNSHARE, "setns": unix.SYS_SETNS,
}

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
	return append(cases, seccompArchCases(call)...)
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
	if runtime.GOARCH == "amd64" {
		x32 := seccompProbe{"x32_getpid", seccompSys(x32SyscallBit | 39), "ENOSYS", seccompBareAny}
		probes = append(probes, x32)
	}
	return probes
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
