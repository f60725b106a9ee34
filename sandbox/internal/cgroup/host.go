//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrUnenforceable reports a requested ceiling that this host's cgroups
// cannot apply. It is an error, not a warning: an execution must not run
// without a ceiling it asked for.
var ErrUnenforceable = errors.New("cgroup: ceiling cannot be enforced on this host")

// DefaultParent is the default directory, in every hierarchy, holding one
// child per execution (and one per tenant). Concurrent executions share
// it, so it is never removed.
const DefaultParent = "termgate"

// namePattern bounds execution names to one safe path element.
var namePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`) })

// Info says what the host can enforce through cgroups; verify prints it.
type Info struct {
	Version string `json:"version"` // "v2", "hybrid", "v1" or "none"
	Memory  bool   `json:"memory"`
	Pids    bool   `json:"pids"`
	CPU     bool   `json:"cpu"`  // cpu weight / shares
	Kill    bool   `json:"kill"` // one-shot kill of the whole group (v2 cgroup.kill or v1 freezer)
}

// Limits are the ceilings of one execution; zero means "not asked for".
type Limits struct {
	MemoryBytes int64
	Pids        int64
	CPUWeight   int // 1..10000 as cgroup v2 cpu.weight; mapped to cpu.shares on v1
}

// Validate rejects values the kernel would misread rather than clamping
// them, so a typo never silently weakens a ceiling.
func (l Limits) Validate() error {
	switch {
	case l.MemoryBytes < 0:
		return fmt.Errorf("cgroup: memory ceiling %d is negative", l.MemoryBytes)
	case l.Pids < 0:
		return fmt.Errorf("cgroup: pids ceiling %d is negative", l.Pids)
	case l.CPUWeight < 0 || l.CPUWeight > 10000:
		return fmt.Errorf("cgroup: cpu weight %d is outside 1..10000", l.CPUWeight)
	}
	return nil
}

// v1Markers maps each v1 controller we use to a file found at the root
// of its hierarchy. pids and freezer have none there, so their mount name
// and filesystem type are all we can check.
var v1Markers = map[string]string{
	"memory":  "memory.limit_in_bytes",
	"pids":    "",
	"cpu":     "cpu.shares",
	"cpuacct": "cpuacct.usage",
	"freezer": "",
}

// Host is what detect found. It is read-only afterwards, so
// concurrent executions share one.
type Host struct {
	version     string
	parent      string          // DefaultParent unless the launcher says otherwise
	unified     string          // cgroup2 mount, "" when absent
	unifiedCtl  map[string]bool // controllers the cgroup2 root can hand down
	unifiedKill bool            // kernel has cgroup.kill (5.14+)
	v1          map[string]string
}

// Detect inspects the hierarchies under root (normally /sys/fs/cgroup)
// and returns a host whose groups live in parent, one path element, in
// every hierarchy ("" is DefaultParent). It never fails: what is absent is
// reported as false, and Create refuses the ceilings that depend on it.
func Detect(root, parent string) *Host {
	h := detect(root)
	if parent != "" {
		h.parent = parent
	}
	return h
}

// detect is Detect with DefaultParent.
func detect(root string) *Host {
	h := &Host{parent: DefaultParent, v1: map[string]string{}}
	h.detectUnified(root)
	if h.unified != root {
		h.detectV1(root)
	}
	h.version = h.classify(root)
	return h
}

// detectUnified finds the cgroup2 tree: the root itself on pure v2 hosts,
// root/unified on hybrid ones.
func (h *Host) detectUnified(root string) {
	for _, dir := range []string{root, filepath.Join(root, "unified")} {
		if fsType(dir) != unix.CGROUP2_SUPER_MAGIC || !writable(dir) {
			continue
		}
		h.unified = dir
		h.unifiedCtl = controllers(dir)
		h.unifiedKill = kernelAtLeast(5, 14)
		return
	}
}

// detectV1 records each v1 hierarchy by its resolved path, so co-mounted
// controllers (cpu,cpuacct) share one directory.
func (h *Host) detectV1(root string) {
	for ctl, marker := range v1Markers {
		dir, err := filepath.EvalSymlinks(filepath.Join(root, ctl))
		if err != nil || fsType(dir) != unix.CGROUP_SUPER_MAGIC || !writable(dir) {
			continue
		}
		if marker != "" && !fileExists(dir, marker) {
			continue
		}
		h.v1[ctl] = dir
	}
}

// writable reports whether this process may make cgroups in dir. A
// hierarchy it cannot write (mounted read-only, as a container runtime
// mounts it, or another user's) is one it cannot use: counted as absent,
// a ceiling that needs it is refused up front rather than at every start.
func writable(dir string) bool {
	return unix.Access(dir, unix.W_OK) == nil
}

// classify names the layout the way operators know it.
func (h *Host) classify(root string) string {
	switch {
	case h.unified == root:
		return "v2"
	case h.unified != "" && len(h.v1) > 0:
		return "hybrid"
	case h.unified != "":
		return "v2"
	case len(h.v1) > 0:
		return "v1"
	}
	return "none"
}

// Info reports what create can enforce on this host.
func (h *Host) Info() Info {
	return Info{
		Version: h.version,
		Memory:  h.has("memory"),
		Pids:    h.has("pids"),
		CPU:     h.has("cpu"),
		Kill:    h.unifiedKill || h.v1["freezer"] != "",
	}
}

// has reports whether either tree carries controller ctl. A controller is
// bound to one tree at a time, so at most one of the two is true.
func (h *Host) has(ctl string) bool {
	return h.unifiedCtl[ctl] || h.v1[ctl] != ""
}

// controllers reads the controllers a cgroup2 directory offers.
func controllers(dir string) map[string]bool {
	data, _ := readControl(filepath.Join(dir, "cgroup.controllers"))
	ctl := map[string]bool{}
	for _, name := range strings.Fields(string(data)) {
		ctl[name] = true
	}
	return ctl
}

// fsType returns the filesystem magic of dir, or 0 when it cannot be
// read. The magic, unlike a directory name, cannot be faked by a plain dir.
func fsType(dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0
	}
	return int64(st.Type)
}

// kernelAtLeast compares the running kernel's release with major.minor.
// cgroup.kill exists only in non-root cgroups, so the version is how we
// know about it before creating one.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	var gotMajor, gotMinor int
	release := unix.ByteSliceToString(u.Release[:])
	if _, err := fmt.Sscanf(release, "%d.%d", &gotMajor, &gotMinor); err != nil {
		return false
	}
	return gotMajor > major || gotMajor == major && gotMinor >= minor
}
