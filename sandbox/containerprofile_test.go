//go:build linux && (amd64 || arm64)

package sandbox

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"github.com/termgate/termgate/sandbox/internal/seccomp"
	"golang.org/x/sys/unix"
)

// decodeContainerProfile decodes the profile strictly: a field the
// runtime-spec does not have is a typo.
func decodeContainerProfile(t *testing.T) ociSeccomp {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(ContainerSeccompProfile()))
	dec.DisallowUnknownFields()
	var p ociSeccomp
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("decode: %v\n%s", err, ContainerSeccompProfile())
	}
	return p
}

// containerVerdicts maps each name the profile refuses to its errno.
func containerVerdicts(t *testing.T, p ociSeccomp) map[string]unix.Errno {
	t.Helper()
	refused := map[string]unix.Errno{}
	for _, r := range p.Syscalls {
		if r.Action != "SCMP_ACT_ERRNO" || (r.ErrnoRet != uint(unix.EPERM) && r.ErrnoRet != uint(unix.ENOSYS)) {
			t.Errorf("rule %+v: want SCMP_ACT_ERRNO with EPERM or ENOSYS", r)
		}
		for _, name := range r.Names {
			if _, dup := refused[name]; dup {
				t.Errorf("%s is in two rules", name)
			}
			refused[name] = unix.Errno(r.ErrnoRet)
		}
	}
	return refused
}

// TestContainerSeccompProfile: every call the sandbox filter refuses
// whatever its arguments is refused by the container's profile, with the
// same errno, unless it is a named exception; the exceptions are allowed.
func TestContainerSeccompProfile(t *testing.T) {
	t.Parallel()
	p := decodeContainerProfile(t)
	if p.DefaultAction != "SCMP_ACT_ALLOW" {
		t.Errorf("defaultAction %q", p.DefaultAction)
	}
	for _, arch := range []string{"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"} {
		if !slices.Contains(p.Architectures, arch) {
			t.Errorf("architectures %q: %s missing", p.Architectures, arch)
		}
	}
	refused := containerVerdicts(t, p)
	sandboxRefused := seccomp.Refused()
	for _, r := range sandboxRefused {
		got, isRefused := refused[r.Name]
		_, allowed := containerAllowed[r.Name]
		want := r.Errno
		if slices.Contains(containerNoSys, r.Name) {
			want = unix.ENOSYS
		}
		switch {
		case allowed && isRefused:
			t.Errorf("%s is an exception (%s) but the profile refuses it", r.Name, containerAllowed[r.Name])
		case !allowed && !isRefused:
			t.Errorf("%s: the sandbox refuses it (%s), the container allows it", r.Name, unix.ErrnoName(r.Errno))
		case !allowed && got != want:
			t.Errorf("%s: refused with %s, want %s", r.Name, unix.ErrnoName(got), unix.ErrnoName(want))
		}
	}
	if len(refused) != len(sandboxRefused)-len(containerAllowed) {
		t.Errorf("the profile refuses %d calls, want the sandbox's %d less the %d exceptions", len(refused), len(sandboxRefused), len(containerAllowed))
	}
}

// TestContainerSeccompExceptions restates what serve and bwrap need
// outside the sandbox, and what stays refused however it looks needed.
func TestContainerSeccompExceptions(t *testing.T) {
	t.Parallel()
	refused := containerVerdicts(t, decodeContainerProfile(t))
	for _, name := range []string{"mount", "umount2", "pivot_root", "unshare", "setns", "clone3", "fspick", "fsconfig"} {
		if _, ok := refused[name]; ok {
			t.Errorf("%s is refused: serve or bwrap needs it", name)
		}
		if containerAllowed[name] == "" {
			t.Errorf("%s: the exception does not say who needs it", name)
		}
	}
	for name, want := range map[string]unix.Errno{
		"io_uring_setup": unix.ENOSYS, "fsopen": unix.ENOSYS, "mount_setattr": unix.ENOSYS,
		"keyctl": unix.EPERM, "bpf": unix.EPERM, "pidfd_getfd": unix.EPERM, "kexec_file_load": unix.EPERM,
	} {
		if got, ok := refused[name]; !ok || got != want {
			t.Errorf("%s: refused %v with %s, want %s", name, ok, unix.ErrnoName(got), unix.ErrnoName(want))
		}
	}
	if len(containerAllowed) != 8 {
		t.Errorf("%d exceptions: a new one needs a line above, with who needs it", len(containerAllowed))
	}
}

// TestContainerSeccompNames: each name the profile holds is the system
// call x/sys numbers as the sandbox filter's tables do (their own test
// checks the numbers against x/sys and the kernel's header), so
// libseccomp resolves the call meant and not a neighbour. The map is
// restated here, apart from the tables: a name added to them without a
// line here fails.
func TestContainerSeccompNames(t *testing.T) {
	t.Parallel()
	known := map[string]uintptr{
		"keyctl": unix.SYS_KEYCTL, "add_key": unix.SYS_ADD_KEY, "request_key": unix.SYS_REQUEST_KEY,
		"bpf": unix.SYS_BPF, "perf_event_open": unix.SYS_PERF_EVENT_OPEN, "userfaultfd": unix.SYS_USERFAULTFD,
		"move_mount": unix.SYS_MOVE_MOUNT, "open_tree": unix.SYS_OPEN_TREE, "open_tree_attr": unix.SYS_OPEN_TREE_ATTR,
		"fsopen": unix.SYS_FSOPEN, "fsconfig": unix.SYS_FSCONFIG, "fsmount": unix.SYS_FSMOUNT, "fspick": unix.SYS_FSPICK,
		"mount_setattr": unix.SYS_MOUNT_SETATTR, "kexec_load": unix.SYS_KEXEC_LOAD, "kexec_file_load": unix.SYS_KEXEC_FILE_LOAD,
		"init_module": unix.SYS_INIT_MODULE, "finit_module": unix.SYS_FINIT_MODULE, "delete_module": unix.SYS_DELETE_MODULE,
		"open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT, "pidfd_getfd": unix.SYS_PIDFD_GETFD,
		"io_uring_setup": unix.SYS_IO_URING_SETUP, "io_uring_enter": unix.SYS_IO_URING_ENTER, "io_uring_register": unix.SYS_IO_URING_REGISTER,
		"mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2, "pivot_root": unix.SYS_PIVOT_ROOT,
		"unshare": unix.SYS_UNSHARE, "setns": unix.SYS_SETNS, "clone3": unix.SYS_CLONE3,
	}
	names := map[string]bool{}
	for _, r := range seccomp.Refused() {
		names[r.Name] = true
	}
	for name := range containerVerdicts(t, decodeContainerProfile(t)) {
		names[name] = true
	}
	for name := range containerAllowed {
		names[name] = true
	}
	for name := range names {
		if _, ok := known[name]; !ok {
			t.Errorf("%s: not a system call this test knows: add it with its unix.SYS_ constant", name)
		}
	}
	if len(names) != len(known) {
		t.Errorf("%d names known here, %d in the tables and the profile", len(known), len(names))
	}
}
