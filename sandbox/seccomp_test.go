//go:build linux && (amd64 || arm64)

package sandbox

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

// needPython returns the interpreter the in-sandbox tests run, skipping
// when it is missing, except under CI.
func needPython(t *testing.T) string {
	t.Helper()
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		sandboxtest.Unavailable(t, "%s not found: %v", python, err)
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
// bwrap's pid 1 loads the filter as its init loop starts, after the fork
// of the process that goes on to exec the command (bwrap 0.8: do_init),
// so on a busy machine the command can look first: it looks for up to a
// second (a filter, once loaded, stays).
func TestSeccompCoversSandboxInit(t *testing.T) {
	t.Parallel()
	look := `i=0; while [ $i -lt 100 ]; do s=$(grep '^Seccomp:' /proc/1/status); [ "$s" != "$(printf 'Seccomp:\t0')" ] && break; i=$((i+1)); sleep 0.01; done; echo "$s"`
	r := runPolicy(t, Policy{Command: sh(look), Proc: ProcPrivate})
	if !r.exit.Success() || r.stdout != "Seccomp:\t2\n" {
		t.Errorf("pid 1: %v", r)
	}
}
