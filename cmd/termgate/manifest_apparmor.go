package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// apparmorFlags is manifest apparmor's flag set, bound to abi.
func apparmorFlags(abi *string) *flag.FlagSet {
	fs := newFlagSet("manifest apparmor")
	fs.StringVar(abi, "abi", "4.0", "apparmor: the policy ABI: 4.0 for AppArmor 4 (Ubuntu 24.04, Debian 13), whose userns rule lets bwrap make user namespaces where unprivileged ones are restricted; 3.0 for older parsers (Debian 12, Ubuntu 22.04), which have no such rule and no such restriction")
	return fs
}

// runManifestAppArmor prints the AppArmor profile of a container that
// runs termgate serve: termgate manifest apparmor [--abi 4.0|3.0].
func runManifestAppArmor(args []string, stdout io.Writer) error {
	var abi string
	fs := apparmorFlags(&abi)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("manifest apparmor: unexpected argument %q", fs.Arg(0))}
	}
	profile, err := apparmorProfile(abi)
	if err != nil {
		return usageError{err}
	}
	_, err = io.WriteString(stdout, profile)
	return err
}

// apparmorProfile is the profile for abi: the template with the lines
// marked "#4.0" kept, unmarked, for 4.0 and dropped for 3.0.
func apparmorProfile(abi string) (string, error) {
	if abi != "4.0" && abi != "3.0" {
		return "", errors.New("manifest apparmor: --abi " + abi + ": want 4.0 or 3.0")
	}
	var b strings.Builder
	for line := range strings.Lines(strings.ReplaceAll(apparmorTemplate, "{{ABI}}", abi)) {
		rule, only4, _ := strings.Cut(line, "  #4.0")
		switch {
		case only4 == "":
			b.WriteString(line)
		case abi == "4.0":
			b.WriteString(rule + "\n")
		}
	}
	return b.String(), nil
}

// apparmorTemplate is the profile. It allows what serve, the keeper,
// bwrap and the programs in the sandboxes use, and narrows nothing: the
// container's capabilities and seccomp profile do, and the sandboxes
// have bwrap's own confinement. What it adds to a runtime's default
// profile is said where it is allowed.
const apparmorTemplate = `# AppArmor profile of a container running termgate serve: printed by
# termgate manifest apparmor. Load it on every node that runs AppArmor:
#
#   termgate manifest apparmor > /etc/apparmor.d/termgate
#   apparmor_parser -r -W /etc/apparmor.d/termgate
#
# and name it in the pod (appArmorProfile: {type: Localhost,
# localhostProfile: termgate}, which termgate manifest kubernetes writes) or
# with podman/docker run --security-opt apparmor=termgate.
#
# Why not the runtime's default profile: it denies mount, umount and
# pivot_root, which bwrap needs to build every sandbox and serve to mount
# workspaces, and it denies writes under /proc/sys, where bwrap limits the
# user namespaces of a sandbox (user/max_user_namespaces). AppArmor 4 also
# refuses unprivileged user namespaces to programs whose profile lacks the
# userns rule (Ubuntu 24.04's kernel.apparmor_restrict_unprivileged_userns),
# and bwrap makes one per sandbox as a tenant's uid.
#
# The profile allows by default; it is not what confines the sandboxes.
# bwrap's namespaces, seccomp filter and dropped capabilities do, and the
# container's capabilities and seccomp profile (termgate manifest seccomp)
# bound serve itself. Every process in the container runs under it, the
# sandboxes' included: it must let them do whatever a shell session does.

abi <abi/{{ABI}}>,

include <tunables/global>

# attach_disconnected: bwrap's processes see paths from a root of their
# own (pivot_root), disconnected from the container's.
profile termgate flags=(attach_disconnected,mediate_deleted) {
  # Files, sockets and IPC as with no profile: the sandbox decides what
  # each command sees, serve needs its state directory, workspaces,
  # cgroups and /proc, and sessions run whatever the image holds.
  file,
  network,
  unix,
  signal,
  dbus,
  mqueue,  #4.0

  # Capabilities: only those the container has are usable at all (the
  # pod's capabilities.add); this rule does not add any.
  capability,

  # bwrap makes a user namespace for every sandbox, as the tenant's uid.
  userns,  #4.0

  # bwrap builds each sandbox's mount table and moves into it; serve
  # mounts workspace images, makes the mount namespace bwrap is forked
  # from, and remounts the container's cgroups read-write.
  mount,
  remount,
  umount,
  pivot_root,

  # serve reads /proc/PID/ns of sandbox processes that run as other uids
  # (ptrace read), and debuggers in a sandbox trace their own programs.
  ptrace,

  # io_uring (AppArmor 4 mediates its sqpoll and credential override) is
  # not allowed: nothing in termgate uses it, and the seccomp profiles
  # refuse it anyway.
}
`
