//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// launchMode is how bwrap gets the namespaces of a sandbox.
type launchMode int

const (
	// modeUserns: bwrap makes a user namespace as the sandbox identity,
	// unprivileged, and the command is uid sandboxUID inside it.
	modeUserns launchMode = iota
	// modeSetuid: bwrap is installed setuid root (where the host gives
	// the sandbox identity no user namespace, the only way), and the
	// launcher is root. bwrap makes the namespaces but the user one with
	// its privilege, then drops to the identity it was run as: the
	// command runs as that host uid, with no capabilities.
	modeSetuid
)

func (m launchMode) String() string {
	if m == modeSetuid {
		return "setuid"
	}
	return "userns"
}

// chooseMode finds how bwrap can make sandboxes as id: through bwrap's
// privilege when it is installed setuid root and termgate is root (and
// not under no-new-privileges), else with a user namespace.
// Where a kernel setting refuses user namespaces (usernsRefused), a trial
// bwrap run as id tells whether it can make one all the same (a profile
// for bwrap may lift AppArmor's restriction); it cannot, the error names
// the setting and the fix. Elsewhere no trial runs, as it would cost
// every start of the command line a process: a container's profile that
// refuses them fails the probe with bwrap's own message.
func chooseMode(bwrap string, id identity) (launchMode, error) {
	// A setuid bwrap refuses --size, and --disable-userns as any user but
	// root: it makes every sandbox the setuid way, user namespaces or not.
	// Under no-new-privileges (a container's no-new-privileges, Kubernetes'
	// allowPrivilegeEscalation: false) the bit is ignored, and bwrap is a
	// plain one.
	// Only root: the launcher sizes the setuid bwrap's tmpfs mounts
	// from outside (boundTmpfs), which needs CAP_SYS_ADMIN.
	if setuidRoot(bwrap) && !noNewPrivs() && os.Geteuid() == 0 {
		return modeSetuid, nil
	}
	if !usernsRefused() {
		return modeUserns, nil
	}
	trial := usernsTrial(bwrap, id)
	if trial == nil {
		return modeUserns, nil
	}
	if os.Geteuid() != 0 {
		return modeUserns, fmt.Errorf("%w: %s: %s (or run termgate as root with bwrap installed setuid root)", ErrUnavailable, usernsBlocker(trial), usernsFix())
	}
	return modeUserns, fmt.Errorf("%w: %s: %s, or install bwrap setuid root (chmod u+s %s) to run without user namespaces",
		ErrUnavailable, usernsBlocker(trial), usernsFix(), bwrap)
}

// usernsTrial runs bwrap as id with a user namespace of its own, as every
// sandbox's bwrap does, and returns why it failed. Not --disable-userns:
// bwrap writes /proc/sys for it, which a container's /proc holds
// read-only, and the sandboxes' bwrap is forked from a lean mount
// namespace without that mount (the probe checks it does).
func usernsTrial(bwrap string, id identity) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bwrap, "--unshare-user", "--ro-bind", "/", "/", "--", "/bin/true")
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if id.switchTo {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: id.uid, Gid: id.gid, Groups: []uint32{}}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if msg := firstLine(stderr.String()); msg != "" {
			return fmt.Errorf("%s", msg)
		}
		return err
	}
	return nil
}

// usernsRefused reports whether a kernel setting refuses user namespaces
// to the sandbox identity, or may.
func usernsRefused() bool {
	return sysctlIs(maxUserNamespaces, "0") || sysctlIs(usernsClone, "0") || sysctlIs(apparmorRestriction, "1")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// setuidRoot reports whether path is a regular file owned by root with
// the set-user-id bit, on a file system that honours it.
func setuidRoot(path string) bool {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil || fs.Flags&unix.ST_NOSUID != 0 {
		return false
	}
	return st.Uid == 0 && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&unix.S_ISUID != 0
}

// The kernel settings that refuse user namespaces, in the order checked.
const (
	maxUserNamespaces   = "/proc/sys/user/max_user_namespaces"
	usernsClone         = "/proc/sys/kernel/unprivileged_userns_clone"
	apparmorRestriction = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"
)

// usernsBlocker names what refused the trial's user namespace: a kernel
// setting when one is set to refuse, else bwrap's own message.
func usernsBlocker(trial error) string {
	switch {
	case sysctlIs(maxUserNamespaces, "0"):
		return "user namespaces are switched off (user.max_user_namespaces = 0)"
	case sysctlIs(usernsClone, "0"):
		return "unprivileged user namespaces are switched off (kernel.unprivileged_userns_clone = 0)"
	case sysctlIs(apparmorRestriction, "1"):
		return "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1)"
	}
	return "bwrap cannot make a user namespace (" + trial.Error() + ")"
}

// usernsFix says how to allow user namespaces for what usernsBlocker found.
func usernsFix() string {
	switch {
	case sysctlIs(maxUserNamespaces, "0"):
		return "set it above 0 (sysctl -w user.max_user_namespaces=15000)"
	case sysctlIs(usernsClone, "0"):
		return "set it to 1 (sysctl -w kernel.unprivileged_userns_clone=1)"
	case sysctlIs(apparmorRestriction, "1"):
		return "load the profile termgate manifest apparmor prints, which allows them for bwrap"
	}
	return "in a container, apply the profile termgate manifest seccomp prints and the settings docs/operations.md lists"
}

func sysctlIs(path, value string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.TrimSpace(string(b)) == value
}

// rootCaps are the capabilities a launcher running as root uses, each
// measured as needed in a container that grants only some: without one
// of them a sandbox fails at its first start, or worse, cannot be
// stopped (KILL: its uid is not ours).
var rootCaps = []struct {
	bit  uint
	name string
	use  string
}{
	{unix.CAP_CHOWN, "CHOWN", "hand workspaces to the sandbox identities"},
	{unix.CAP_DAC_OVERRIDE, "DAC_OVERRIDE", "make cgroups and read files of other uids"},
	{unix.CAP_FOWNER, "FOWNER", "set modes on workspaces other uids own"},
	{unix.CAP_KILL, "KILL", "signal sandboxes, which run as other uids"},
	{unix.CAP_SETGID, "SETGID", "run bwrap as a sandbox identity"},
	{unix.CAP_SETUID, "SETUID", "run bwrap as a sandbox identity"},
	{unix.CAP_SYS_CHROOT, "SYS_CHROOT", "fork bwrap from a lean mount namespace"},
	{unix.CAP_SYS_PTRACE, "SYS_PTRACE", "reach the namespaces of sandboxes of other uids"},
	{unix.CAP_SYS_ADMIN, "SYS_ADMIN", "make and enter namespaces and mounts"},
}

// RootCapabilities names the capabilities a launcher running as root
// needs, as a container runtime spells them (CHOWN, KILL, ...): without
// one, NewLauncher fails. Network policies need NET_ADMIN besides.
func RootCapabilities() []string {
	names := make([]string, len(rootCaps))
	for i, c := range rootCaps {
		names[i] = c.name
	}
	return names
}

// NetworkPolicyCapabilities names what network policies need besides
// RootCapabilities: NET_ADMIN for a sandbox's loopback, routes and
// rules, NET_BIND_SERVICE for the DNS stub on port 53 in it.
func NetworkPolicyCapabilities() []string { return []string{"NET_ADMIN", "NET_BIND_SERVICE"} }

// checkRootCaps fails, naming each missing capability and its use, when
// termgate runs as root without one it needs (a container's root
// usually lacks some).
func checkRootCaps() error {
	if os.Geteuid() != 0 {
		return nil
	}
	eff, err := effectiveCaps()
	if err != nil {
		return fmt.Errorf("%w: read capabilities: %w", ErrUnavailable, err)
	}
	var missing []string
	for _, c := range rootCaps {
		if eff&(1<<c.bit) == 0 {
			missing = append(missing, c.name+" ("+c.use+")")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: running as root without the capabilities %s: grant them (in a container: --cap-add; termgate manifest kubernetes lists them)", ErrUnavailable, strings.Join(missing, ", "))
	}
	return nil
}

// effectiveCaps is the calling thread's effective capability set.
// Capabilities are per thread, and /proc/self/status shows the thread
// group leader's: while a file operation holds that thread at another
// filesystem uid (fsid), its CHOWN, DAC_OVERRIDE and FOWNER are cleared.
func effectiveCaps() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, err
	}
	return uint64(data[1].Effective)<<32 | uint64(data[0].Effective), nil
}

// noNewPrivs reports whether the calling thread has no_new_privs set,
// under which an exec grants no set-user-id privilege (it is per
// thread, like capabilities, and inherited by every exec).
func noNewPrivs() bool {
	v, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	return err == nil && v == 1
}

// kernelAtLeast compares the running kernel's release with major.minor.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	var gotMajor, gotMinor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &gotMajor, &gotMinor); err != nil {
		return false
	}
	return gotMajor > major || gotMajor == major && gotMinor >= minor
}
