//go:build linux

package sandbox

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/termgate/termgate/sandbox/internal/sandboxinit"
	"golang.org/x/sys/unix"
)

// sandboxUID and sandboxGID are the ids the process has inside its user
// namespace, whatever host identity bwrap runs as.
const (
	sandboxUID = 1000
	sandboxGID = 1000
)

// fileKind says how Start materialises one file handed to bwrap.
type fileKind int

const (
	fileData fileKind = iota // bytes in a sealed memfd
	fileBind                 // a host path opened with O_PATH, no symlinks followed
	fileCopy                 // a world-readable host file opened for reading, no symlinks followed
)

// planFile is one descriptor bwrap inherits beyond stdio.
type planFile struct {
	kind fileKind
	data []byte // fileData
	path string // fileBind, fileCopy
	dir  bool   // fileBind: the path must be a directory
}

// plan is everything bwrap needs, computed without touching the host, so
// tests can check it argument by argument.
type plan struct {
	opts  []string           // bwrap options, passed through --args on fd argsFD
	argv  []string           // what follows "--": the init, then the command
	files []planFile         // inherited as fd firstFileFD, firstFileFD+1, ...
	init  sandboxinit.Config // sent to the init on its control socket
	// sizeOutside: the tmpfs mounts have no size yet; the init holds
	// until boundTmpfs gives them one (modeSetuid).
	sizeOutside bool
}

// planOpts is room for a plan's options made at once: a PTY shell's
// holds about 140 on a Debian host.
const planOpts = 160

// The descriptors bwrap inherits: the init's control socket, where bwrap
// reads its options, and the first of plan.files.
const (
	argsFD      = initControlFD + 1
	firstFileFD = argsFD + 1
)

func (pl *plan) add(opts ...string) { pl.opts = append(pl.opts, opts...) }

// addFile registers f and returns the descriptor number bwrap will see.
func (pl *plan) addFile(f planFile) string {
	pl.files = append(pl.files, f)
	return strconv.Itoa(firstFileFD + len(pl.files) - 1)
}

// hostLayout is what the plan needs to know about the host's filesystem.
type hostLayout struct {
	// links maps top-level paths such as /bin to their symlink target
	// ("usr/bin"); a path absent here but listed in dirs is a real directory.
	links map[string]string
	dirs  []string
	// etc lists the /etc entries present on the host and how each is shown.
	etc map[string]etcEntry
	// hostNet holds file contents copied into /etc with host networking.
	hostNet map[string][]byte
	// procMasked lists the procMasks entries the host's /proc has, each
	// marked as a directory or not.
	procMasked map[string]bool
	// init is the host path of the program the sandbox runs as its init.
	init string
	// landlock says the kernel has Landlock, so the init puts the command
	// in a domain of its own.
	landlock bool
	// mode is how bwrap makes the namespaces; with modeSetuid the command
	// runs as the host identity bwrap was run as, id or a tenant's.
	mode launchMode
	id   identity
	// nprocPids carries a Limits.Pids as RLIMIT_NPROC (Config.PidsFallback).
	nprocPids bool
}

// innerIDs are the uid and gid the command has in the sandbox: sandboxUID
// in its own user namespace, else the host identity bwrap runs as (see
// Launcher.identityFor).
func (h hostLayout) innerIDs(p Policy) (uid, gid uint32) {
	switch {
	case h.mode != modeSetuid:
		return sandboxUID, sandboxGID
	case h.id.switchTo && (p.UID != 0 || p.GID != 0):
		return p.UID, p.GID
	}
	return h.id.uid, h.id.gid
}

// etcEntry is how one of etcEntries is shown in the sandbox: a link
// recreated, a small file copied, or else a read-only bind.
//
// Every bind costs bwrap a read of the whole mount table, and the kernel
// formats it under its global mount lock (namespace_sem), which every
// other sandbox's mount then waits for: with 16 starts at once, that lock
// was where their time went. A copy into the sandbox's read-only root
// costs no mount and no lock, only the file's pages, so the small
// configuration files are copied, each at every start from the host's
// file as it is then. Large files (the loader's cache) and directories
// stay bound.
type etcEntry struct {
	link string // the symlink's target
	copy bool   // a world-readable regular file of at most maxCopiedEtc bytes
}

// maxCopiedEtc is the largest /etc file copied rather than bound: the
// configuration files (services, openssl.cnf) are within it, the
// loader's cache is not.
const maxCopiedEtc = 16 << 10

// etcEntries are the only /etc entries a sandbox sees: what the dynamic
// linker, name service and TLS need. Never shadow, ssh keys or ssl/private;
// nor /etc/ca-certificates, which holds only update-ca-certificates' hooks
// (the certificates are in /etc/ssl/certs).
var etcEntries = [...]string{
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
	"/etc/nsswitch.conf", "/etc/ssl/certs", "/etc/ssl/openssl.cnf",
	"/etc/localtime", "/etc/alternatives",
	"/etc/host.conf", "/etc/gai.conf", "/etc/services", "/etc/protocols",
}

// hostNetEntries are copied only with NetworkHost.
var hostNetEntries = []string{"/etc/resolv.conf", "/etc/hosts"}

// procMasks are the entries of a private /proc that tell about the host
// rather than the sandbox: its kernel command line, kernel memory and
// symbols, loaded modules, keys and timers of every process, hardware.
// Files are covered with /dev/null, directories with an empty read-only
// tmpfs. bwrap already makes sys, sysrq-trigger, irq and bus read-only.
var procMasks = []string{
	"/proc/cmdline", "/proc/config.gz", "/proc/kallsyms", "/proc/kcore", "/proc/keys",
	"/proc/key-users", "/proc/latency_stats", "/proc/modules", "/proc/sched_debug",
	"/proc/timer_list", "/proc/vmallocinfo", "/proc/acpi", "/proc/asound",
	"/proc/driver", "/proc/scsi",
}

// systemTops are the top-level system paths that are symlinks into /usr
// on merged-/usr hosts and directories elsewhere.
var systemTops = []string{"/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"}

// buildPlan turns a normalized, valid policy into bwrap's arguments.
func buildPlan(p Policy, host hostLayout, seccomp []byte) plan {
	pl := plan{opts: make([]string, 0, planOpts)}
	pl.namespaces(p, host)
	pl.system(host)
	pl.etc(p, host)
	size := strconv.FormatInt(p.TmpSize, 10)
	pl.dev(p, host, size)
	pl.proc(p, host)
	pl.tmpfs(host, size, "/tmp")
	pl.tmpfs(host, size, "/run")
	pl.binds(p)
	pl.add("--ro-bind-fd", pl.addFile(planFile{kind: fileBind, path: host.init}), initPath)
	pl.add("--remount-ro", "/", "--chdir", p.WorkspaceMount)
	pl.add("--seccomp", pl.addFile(planFile{kind: fileData, data: seccomp}))
	// The init runs with one variable of termgate's, none of the client's:
	// a single thread keeps it within the smallest pids ceiling.
	pl.add("--clearenv", "--setenv", "GOMAXPROCS", "1")
	pl.command(p, host)
	return pl
}

// dev gives the sandbox a fresh /dev whose only writable places are the
// device nodes and /dev/shm, capped like /tmp. Terminals of its own come
// from a private devpts instance the launcher bounds to Policy.PTYs before
// the command runs; with none allowed, an empty read-only tmpfs hides it.
func (pl *plan) dev(p Policy, host hostLayout, size string) {
	pl.add("--dev", "/dev")
	pl.tmpfs(host, size, "/dev/shm")
	if p.PTYs == 0 {
		pl.tmpfs(host, "4096", "/dev/pts")
		pl.add("--remount-ro", "/dev/pts")
	}
	pl.add("--remount-ro", "/dev")
}

// tmpfs mounts a tmpfs of size bytes at dest. A setuid bwrap refuses
// --size: there the tmpfs is mounted without one, the init holds, and the
// launcher sizes the writable ones from outside before the command runs
// (boundTmpfs); read-only ones stay empty whatever their size.
func (pl *plan) tmpfs(host hostLayout, size, dest string) {
	if host.mode == modeSetuid {
		pl.add("--tmpfs", dest)
		pl.sizeOutside = true
		return
	}
	pl.add("--size", size, "--tmpfs", dest)
}

// joinNetwork has bwrap stay in the network namespace it is forked in
// (a preparedNet) rather than make one, and the init hold only for what
// else needs it: the network's sockets are open before the fork.
func (pl *plan) joinNetwork(p Policy) {
	pl.opts = slices.DeleteFunc(pl.opts, func(o string) bool { return o == "--unshare-net" })
	pl.init.Hold = p.PTYs > 0 || pl.sizeOutside
}

// namespaces asks for every namespace. With modeSetuid there is no user
// namespace: bwrap refuses --uid and --gid without one, and
// --disable-userns as anyone but root; the seccomp filter refuses the
// command a user namespace of its own (unshare, clone's namespace flags,
// clone3).
func (pl *plan) namespaces(p Policy, host hostLayout) {
	if host.mode != modeSetuid {
		pl.add("--unshare-user", "--disable-userns",
			"--uid", strconv.Itoa(sandboxUID), "--gid", strconv.Itoa(sandboxGID))
	}
	pl.add("--unshare-pid", "--unshare-ipc", "--unshare-cgroup",
		"--unshare-uts", "--hostname", DefaultHostname)
	if p.Network != NetworkHost {
		pl.add("--unshare-net")
	}
	pl.add("--die-with-parent", "--cap-drop", "ALL")
	if p.TTY == nil {
		// Pipes: the command leads a session of its own, with no terminal to
		// push input into. With a PTY, the init does this inside (see command).
		pl.add("--new-session")
	}
}

func (pl *plan) system(host hostLayout) {
	pl.add("--ro-bind", "/usr", "/usr")
	for _, top := range systemTops {
		if target, ok := host.links[top]; ok {
			pl.add("--symlink", target, top)
		}
	}
	for _, dir := range host.dirs {
		pl.add("--ro-bind", dir, dir)
	}
}

func (pl *plan) etc(p Policy, host hostLayout) {
	for _, e := range etcEntries {
		entry, ok := host.etc[e]
		switch {
		case !ok:
		case entry.link != "":
			pl.add("--symlink", entry.link, e)
		case entry.copy:
			pl.add("--perms", "0444", "--file", pl.addFile(planFile{kind: fileCopy, path: e}), e)
		default:
			pl.add("--ro-bind", e, e)
		}
	}
	uid, gid := host.innerIDs(p)
	pl.addData("/etc/passwd", passwdFile(p.WorkspaceMount, uid, gid))
	pl.addData("/etc/group", groupFile(gid))
	pl.addData("/etc/hostname", []byte(DefaultHostname+"\n"))
	hosts := hostsFile()
	if p.Network == NetworkHost {
		for _, e := range hostNetEntries {
			if data, ok := host.hostNet[e]; ok && e != "/etc/hosts" {
				pl.addData(e, data)
			}
		}
		if data, ok := host.hostNet["/etc/hosts"]; ok {
			hosts = data // the host's network, the host's names
		}
	}
	if p.Redirect != nil && p.Redirect.DNS != 0 {
		pl.addData("/etc/resolv.conf", resolvConf)
	}
	pl.addData("/etc/hosts", hosts)
}

// resolvConf names the DNS stub of Policy.Redirect on the sandbox's own
// loopback. Its answers are final: a name it refuses is refused
// everywhere, so searching other suffixes or trying again gains nothing.
var resolvConf = []byte("nameserver 127.0.0.1\noptions attempts:1\n")

// hostsFile is the sandbox's /etc/hosts without host networking: only
// loopback names, so that localhost resolves (glibc has no built-in
// entry for it) and so does the sandbox's hostname.
func hostsFile() []byte {
	return []byte("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + DefaultHostname + "\n")
}

// addData writes data to dest in the sandbox's root, which bwrap makes
// read-only before the command runs (see etcEntry for why not a bind).
func (pl *plan) addData(dest string, data []byte) {
	fd := pl.addFile(planFile{kind: fileData, data: data})
	pl.add("--perms", "0444", "--file", fd, dest)
}

func passwdFile(home string, uid, gid uint32) []byte {
	return fmt.Appendf(nil, "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"+
		"sandbox:x:%d:%d:termgate sandbox:%s:/bin/sh\n"+
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		uid, gid, home)
}

func groupFile(gid uint32) []byte {
	return fmt.Appendf(nil, "root:x:0:\nsandbox:x:%d:\nnogroup:x:65534:\n", gid)
}

func (pl *plan) proc(p Policy, host hostLayout) {
	switch p.Proc {
	case ProcNone:
		if raceBuild {
			// The race detector's runtime reads its executable as it starts
			// and complains on the command's stderr when it cannot.
			pl.add("--symlink", initPath, "/proc/self/exe")
		}
	case ProcPrivate:
		pl.add("--proc", "/proc")
		for _, m := range procMasks {
			dir, ok := host.procMasked[m]
			switch {
			case !ok:
			case dir:
				pl.tmpfs(host, "4096", m)
				pl.add("--remount-ro", m)
			default:
				pl.add("--ro-bind", "/dev/null", m)
			}
		}
	case ProcSelfExe:
		pl.add("--symlink", p.SelfExe, "/proc/self/exe")
	}
}

// binds mounts the workspace and the extra binds, shallowest first, so a
// bind nested in another is mounted on top of it and keeps its own mode.
func (pl *plan) binds(p Policy) {
	all := append([]Bind{{Source: p.Workspace, Dest: p.WorkspaceMount, Writable: !p.WorkspaceReadOnly}}, p.Binds...)
	sort.SliceStable(all, func(i, j int) bool { return depth(all[i].Dest) < depth(all[j].Dest) })
	for _, b := range all {
		fd := pl.addFile(planFile{kind: fileBind, path: b.Source, dir: b.Dest == p.WorkspaceMount})
		op := "--ro-bind-fd"
		if b.Writable {
			op = "--bind-fd"
		}
		pl.add(op, fd, b.Dest)
	}
}

func depth(p string) int { return strings.Count(p, "/") }

// command builds what bwrap executes: the init, which gets the command's
// environment, working directory, terminal and rlimits on its control
// socket and execs the command in place.
func (pl *plan) command(p Policy, host hostLayout) {
	pl.argv = append(append(pl.argv, "--", initPath), p.Command...)
	pl.init = sandboxinit.Config{
		Env: p.sortedEnv(), Cwd: p.Cwd, Terminal: p.TTY != nil,
		Hold: pl.sizeOutside || p.PTYs > 0 || len(p.Listen) > 0 || p.Redirect != nil, Rlimits: rlimits(p.Limits, host.nprocPids), Landlock: host.landlock,
	}
}

// rlimits lists the requested rlimits, each set with soft = hard inside
// the user namespace, where no process can raise a hard limit again. The
// address space comes last: the init allocates nothing after it.
//
// With nprocPids, Limits.Pids is also RLIMIT_NPROC, the process ceiling
// of a host without a pids controller (Config.PidsFallback). Since 5.14
// the kernel counts it per user in each user namespace: the command is
// the only process of its uid in its own namespace, so the count is the
// execution's (bwrap's pid 1 and the init included, as a pids cgroup
// counts them). With modeSetuid, or before 5.14, the count is every
// process of the host uid: the ceiling is shared by every execution of
// that uid (Probe's guarantee says which).
func rlimits(l Limits, nprocPids bool) []sandboxinit.Rlimit {
	var nproc uint64
	if nprocPids && l.Pids > 0 {
		nproc = uint64(l.Pids)
	}
	var out []sandboxinit.Rlimit
	for _, r := range []sandboxinit.Rlimit{
		{Resource: unix.RLIMIT_CPU, Value: l.CPUSeconds}, {Resource: unix.RLIMIT_FSIZE, Value: l.FileSize},
		{Resource: unix.RLIMIT_NOFILE, Value: l.OpenFiles}, {Resource: unix.RLIMIT_NPROC, Value: nproc},
		{Resource: unix.RLIMIT_AS, Value: l.AddressSpace},
	} {
		if r.Value != 0 {
			out = append(out, r)
		}
	}
	return out
}

// encodeArgs joins options the way bwrap's --args expects them.
func encodeArgs(opts []string) []byte {
	n := len(opts)
	for _, o := range opts {
		n += len(o)
	}
	b := make([]byte, 0, n)
	for _, o := range opts {
		b = append(append(b, o...), 0)
	}
	return b
}
