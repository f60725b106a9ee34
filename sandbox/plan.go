package sandbox

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Paths of the helpers that run inside the sandbox between bwrap and the
// command. Both come from the read-only /usr and exec in place, so the
// command keeps their pid.
const (
	setsidPath  = "/usr/bin/setsid"  // util-linux: new session with the PTY as controlling terminal
	envPath     = "/usr/bin/env"     // coreutils: enters the requested cwd inside the sandbox
	prlimitPath = "/usr/bin/prlimit" // util-linux: sets the rlimits inside the sandbox
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
)

// planFile is one descriptor bwrap inherits beyond stdio.
type planFile struct {
	kind fileKind
	data []byte // fileData
	path string // fileBind
	dir  bool   // fileBind: the path must be a directory
}

// plan is everything bwrap needs, computed without touching the host, so
// tests can check it argument by argument.
type plan struct {
	opts    []string   // bwrap options, passed through --args on fd argsFD
	argv    []string   // what follows "--": helpers, then the command
	files   []planFile // inherited as fd firstFileFD, firstFileFD+1, ...
	helpers int        // helpers in argv that exec before the command
	last    string     // path of the helper that execs the command; "" for bwrap
}

// argsFD is where bwrap reads its options. firstFileFD is the first
// descriptor of plan.files.
const (
	argsFD      = 3
	firstFileFD = 4
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
	// etc lists the /etc entries present on the host, with the symlink
	// target for those that are links.
	etc map[string]string
	// hostNet holds file contents copied into /etc with host networking.
	hostNet map[string][]byte
}

// etcEntries are the only /etc entries a sandbox sees: what the dynamic
// linker, name service and TLS need. Never shadow, ssh keys or ssl/private.
var etcEntries = []string{
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
	"/etc/nsswitch.conf", "/etc/ssl/certs", "/etc/ssl/openssl.cnf",
	"/etc/ca-certificates", "/etc/localtime", "/etc/alternatives",
	"/etc/host.conf", "/etc/gai.conf", "/etc/services", "/etc/protocols",
}

// hostNetEntries are copied only with NetworkHost.
var hostNetEntries = []string{"/etc/resolv.conf", "/etc/hosts"}

// systemTops are the top-level system paths that are symlinks into /usr
// on merged-/usr hosts and directories elsewhere.
var systemTops = []string{"/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"}

// buildPlan turns a normalized, valid policy into bwrap's arguments.
func buildPlan(p Policy, host hostLayout, seccomp []byte) plan {
	var pl plan
	pl.namespaces(p)
	pl.system(host)
	pl.etc(p, host)
	pl.add("--dev", "/dev")
	pl.proc(p)
	size := strconv.FormatInt(p.TmpSize, 10)
	pl.add("--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", "/run")
	pl.binds(p)
	pl.add("--remount-ro", "/", "--chdir", p.WorkspaceMount)
	pl.add("--seccomp", pl.addFile(planFile{kind: fileData, data: seccomp}))
	pl.environment(p)
	pl.command(p)
	return pl
}

func (pl *plan) namespaces(p Policy) {
	pl.add("--unshare-user", "--disable-userns",
		"--uid", strconv.Itoa(sandboxUID), "--gid", strconv.Itoa(sandboxGID),
		"--unshare-pid", "--unshare-ipc", "--unshare-cgroup",
		"--unshare-uts", "--hostname", DefaultHostname)
	if p.Network != NetworkHost {
		pl.add("--unshare-net")
	}
	pl.add("--die-with-parent", "--cap-drop", "ALL")
	if p.TTY == nil {
		// Pipes: the command leads a session of its own, with no terminal to
		// push input into. With a PTY, setsid does this inside (see command).
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
		target, ok := host.etc[e]
		switch {
		case !ok:
		case target != "":
			pl.add("--symlink", target, e)
		default:
			pl.add("--ro-bind", e, e)
		}
	}
	pl.addData("/etc/passwd", passwdFile(p.WorkspaceMount))
	pl.addData("/etc/group", groupFile())
	if p.Network == NetworkHost {
		for _, e := range hostNetEntries {
			if data, ok := host.hostNet[e]; ok {
				pl.addData(e, data)
			}
		}
	}
}

func (pl *plan) addData(dest string, data []byte) {
	fd := pl.addFile(planFile{kind: fileData, data: data})
	pl.add("--perms", "0444", "--ro-bind-data", fd, dest)
}

func passwdFile(home string) []byte {
	return fmt.Appendf(nil, "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"+
		"sandbox:x:%d:%d:termgate sandbox:%s:/bin/sh\n"+
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		sandboxUID, sandboxGID, home)
}

func groupFile() []byte {
	return fmt.Appendf(nil, "root:x:0:\nsandbox:x:%d:\nnogroup:x:65534:\n", sandboxGID)
}

// environment gives the command exactly the policy's variables. bwrap
// itself runs with none, so nothing reaches the host's dynamic loader.
func (pl *plan) environment(p Policy) {
	pl.add("--clearenv")
	for _, kv := range p.sortedEnv() {
		k, v, _ := strings.Cut(kv, "=")
		pl.add("--setenv", k, v)
	}
}

func (pl *plan) proc(p Policy) {
	switch p.Proc {
	case ProcPrivate:
		pl.add("--proc", "/proc")
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

// command builds what bwrap executes. setsid gives a PTY command its own
// session with the terminal as controlling tty (so job control works and
// signals reach it, not bwrap); env -C enters the cwd from inside, so no
// path can lead bwrap itself out of the sandbox.
func (pl *plan) command(p Policy) {
	pl.argv = append(pl.argv, "--")
	if p.TTY != nil {
		pl.argv = append(pl.argv, setsidPath, "--ctty")
		pl.helpers, pl.last = pl.helpers+1, setsidPath
	}
	if p.Cwd != p.WorkspaceMount {
		pl.argv = append(pl.argv, envPath, "-C", p.Cwd, "--")
		pl.helpers, pl.last = pl.helpers+1, envPath
	}
	if rl := rlimitArgs(p.Limits); len(rl) > 0 {
		pl.argv = append(append(append(pl.argv, prlimitPath), rl...), "--")
		pl.helpers, pl.last = pl.helpers+1, prlimitPath
	}
	pl.argv = append(pl.argv, p.Command...)
}

// rlimitArgs sets each requested rlimit with soft = hard, inside the
// sandbox's user namespace, where no process can raise a hard limit again.
func rlimitArgs(l Limits) []string {
	var out []string
	for _, r := range []struct {
		name string
		v    uint64
	}{{"cpu", l.CPUSeconds}, {"as", l.AddressSpace}, {"fsize", l.FileSize}, {"nofile", l.OpenFiles}} {
		if r.v != 0 {
			out = append(out, fmt.Sprintf("--%s=%d:%d", r.name, r.v, r.v))
		}
	}
	return out
}

// encodeArgs joins options the way bwrap's --args expects them.
func encodeArgs(opts []string) []byte {
	var b strings.Builder
	for _, o := range opts {
		b.WriteString(o)
		b.WriteByte(0)
	}
	return []byte(b.String())
}
