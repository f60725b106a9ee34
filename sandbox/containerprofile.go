//go:build linux

package sandbox

import (
	"encoding/json"
	"slices"
	"sync"

	"github.com/termgate/termgate/sandbox/internal/seccomp"
	"golang.org/x/sys/unix"
)

// ContainerSeccompProfile returns the seccomp profile for a container
// that runs termgate serve, as OCI runtime-spec JSON: the format of
// Podman's and Docker's --security-opt seccomp=FILE and of a Kubernetes
// seccompProfile of type Localhost (termgate manifest seccomp prints it).
//
// It allows every call by default and refuses, with the sandbox
// filter's errno, each call the sandbox filter refuses whatever its
// arguments (internal/seccomp.Refused, one list for both), except those
// serve and bwrap make themselves outside the sandbox (containerAllowed);
// the new mount API is refused with ENOSYS instead (containerNoSys). A
// runtime's default profile cannot be used instead: it refuses mount,
// unshare and setns, or allows them only with capabilities it grants
// alongside. Everything a sandbox runs stays under the sandbox filter
// too, which bwrap installs last; this profile narrows what serve, the
// keeper and bwrap's setup may call, and covers the i386 and x32 ABIs by
// name where the sandbox filter refuses them outright. The result is a
// fresh copy.
func ContainerSeccompProfile() []byte { return slices.Clone(containerProfile()) }

// containerAllowed are the calls the sandbox filter refuses that the
// container must allow, and who makes them.
var containerAllowed = map[string]string{
	"mount":      "bwrap builds each sandbox's mount table; serve mounts workspace images and makes the lean mount namespace bwrap is forked from",
	"umount2":    "bwrap drops the old root; serve unmounts workspace images and trims the lean mount namespace",
	"pivot_root": "bwrap moves each sandbox into its new root",
	"unshare":    "serve makes network and mount namespaces ahead of bwrap, and the keeper unshares its file table",
	"setns":      "serve enters a sandbox's network namespace to open sockets in it and write its routes and rules, and the lean mount namespace to fork bwrap",
	"clone3":     "Go's os/exec forks bwrap straight into its cgroup (CLONE_INTO_CGROUP) and asks for a pidfd, both only through clone3",
	"fspick":     "serve bounds each sandbox's devpts instance (its max terminals), and a setuid bwrap's tmpfs mounts (their size), by reconfiguring them from outside",
	"fsconfig":   "serve sets the options of those reconfigurations",
}

// containerNoSys are calls the sandbox filter refuses with EPERM that
// the container refuses with ENOSYS: the rest of the new mount API.
// Neither serve nor bwrap 0.8 makes them (mount(2) makes all their
// mounts; fspick and fsconfig only reconfigure devpts and tmpfs), but they are no
// more than mount's power, and a newer bwrap or libmount that tries them
// first takes ENOSYS for "this kernel has none" and falls back to
// mount(2), where EPERM would fail the mount. Without fsopen, fsconfig
// reaches only superblocks that already exist, never a new legacy
// filesystem's parser (CVE-2022-0185 was one, reached from a user
// namespace).
var containerNoSys = []string{"fsopen", "fsmount", "move_mount", "open_tree", "open_tree_attr", "mount_setattr"}

// io_uring stays refused: serve, the keeper and Go's runtime make no
// io_uring call, and it runs operations without the system calls
// either filter checks.

// containerArchitectures are the ABIs the profile covers: x86_64 with
// the i386 and x32 ABIs its kernel also runs, and aarch64 with AArch32.
// libseccomp numbers each name per ABI; a name an ABI lacks
// (kexec_file_load on i386) is skipped by the runtime.
var containerArchitectures = []string{"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"}

// ociSeccomp is the part of the OCI runtime-spec's linux.seccomp the
// profile uses.
type ociSeccomp struct {
	DefaultAction string           `json:"defaultAction"`
	Architectures []string         `json:"architectures"`
	Syscalls      []ociSeccompRule `json:"syscalls"`
}

// ociSeccompRule refuses names with errnoRet.
type ociSeccompRule struct {
	Names    []string `json:"names"`
	Action   string   `json:"action"`
	ErrnoRet uint     `json:"errnoRet"`
}

// containerProfile builds the profile once: it depends on nothing but
// the tables.
var containerProfile = sync.OnceValue(buildContainerProfile)

// buildContainerProfile groups the refused calls by errno, in the
// sandbox filter's order.
func buildContainerProfile() []byte {
	byErrno := map[unix.Errno][]string{}
	var order []unix.Errno
	for _, r := range seccomp.Refused() {
		if _, ok := containerAllowed[r.Name]; ok {
			continue
		}
		errno := r.Errno
		if slices.Contains(containerNoSys, r.Name) {
			errno = unix.ENOSYS
		}
		if _, seen := byErrno[errno]; !seen {
			order = append(order, errno)
		}
		byErrno[errno] = append(byErrno[errno], r.Name)
	}
	p := ociSeccomp{DefaultAction: "SCMP_ACT_ALLOW", Architectures: containerArchitectures}
	for _, errno := range order {
		p.Syscalls = append(p.Syscalls, ociSeccompRule{Names: byErrno[errno], Action: "SCMP_ACT_ERRNO", ErrnoRet: uint(errno)})
	}
	out, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		panic("sandbox: container seccomp profile: " + err.Error())
	}
	return append(out, '\n')
}
