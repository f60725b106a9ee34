//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Group is the set of directories, one per hierarchy in use, that hold
// every process of one execution.
type Group struct {
	name      string
	base      string   // the path from each hierarchy's root to the group's parent
	dirs      []string // every directory created, in creation order
	unified   string   // cgroup2 directory, "" when the host has none
	canKill   bool     // unified has cgroup.kill
	freezer   string   // v1 freezer directory, used only without cgroup.kill
	memoryV1  string
	pidsV1    string
	cpuacctV1 string       // used only without a cgroup2 directory
	removed   atomic.Bool  // later calls must not touch a reused name
	release   func() error // drops the tenant's hold, nil without a tenant
	released  atomic.Bool
}

// Dirs lists the group's directories, one per hierarchy, in creation order.
func (c *Group) Dirs() []string { return slices.Clone(c.dirs) }

// Create makes <hierarchy>/termgate/<name> in every hierarchy the limits
// need and writes the limits. A requested ceiling the host cannot apply is
// an error wrapping ErrUnenforceable; on any error nothing is left behind.
func (h *Host) Create(name string, lim Limits) (*Group, error) {
	return h.createIn(h.parent, name, lim, lim)
}

// createIn makes <hierarchy>/<base>/<name>. join names the ceilings the
// group must sit under, its own and its tenant's: a hierarchy is joined
// when either asks for it, and only lim's values are written.
func (h *Host) createIn(base, name string, lim, join Limits) (*Group, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	if err := h.checkEnforceable(lim); err != nil {
		return nil, err
	}
	c := &Group{name: name, base: base}
	if err := h.populate(c, lim, join); err != nil {
		return nil, errors.Join(err, c.rmdirAll())
	}
	return c, nil
}

// ValidateName keeps name a single path element: "." and ".." match
// the pattern but would land outside termgate/.
func ValidateName(name string) error {
	if !namePattern().MatchString(name) || name == "." || name == ".." {
		return fmt.Errorf("cgroup: invalid name %q: want 1-64 of [A-Za-z0-9._-] except the names \".\" and \"..\"", name)
	}
	return nil
}

// checkEnforceable refuses up front, before any directory exists, and names
// every missing ceiling at once.
func (h *Host) checkEnforceable(lim Limits) error {
	var missing []string
	if lim.MemoryBytes > 0 && !h.has("memory") {
		missing = append(missing, "memory")
	}
	if lim.Pids > 0 && !h.has("pids") {
		missing = append(missing, "pids")
	}
	if lim.CPUWeight > 0 && !h.has("cpu") {
		missing = append(missing, "cpu")
	}
	if len(missing) > 0 {
		return fmt.Errorf("cgroup: %s ceiling: %w", strings.Join(missing, ", "), ErrUnenforceable)
	}
	return nil
}

// populate creates the directories and writes the limits, recording each
// directory in c as soon as it exists so create can undo a partial build.
// A hierarchy that join needs and lim does not is joined without a value
// of the group's own (the limit functions take 0 as "join only").
func (h *Host) populate(c *Group, lim, join Limits) error {
	if err := h.makeUnified(c, join); err != nil {
		return err
	}
	if err := h.makeTracking(c); err != nil {
		return err
	}
	if join.MemoryBytes > 0 {
		if err := h.limitMemory(c, lim.MemoryBytes); err != nil {
			return err
		}
	}
	if join.Pids > 0 {
		if err := h.limitPids(c, lim.Pids); err != nil {
			return err
		}
	}
	if join.CPUWeight > 0 {
		return h.limitCPU(c, lim.CPUWeight)
	}
	return nil
}

// makeUnified creates the cgroup2 directory whenever the host has the tree,
// even without limits: it gives cgroup.kill and cpu.stat for free.
func (h *Host) makeUnified(c *Group, lim Limits) error {
	if h.unified == "" {
		return nil
	}
	if ctls := h.unifiedWanted(lim); len(ctls) > 0 {
		chain, err := ensure(h.unified, c.base)
		if err != nil {
			return err
		}
		for _, ctl := range ctls {
			if err := enable(ctl, append([]string{h.unified}, chain...)...); err != nil {
				return err
			}
		}
	}
	var err error
	if c.unified, err = c.mkdir(h.unified); err != nil {
		return err
	}
	c.canKill = fileExists(c.unified, "cgroup.kill")
	return nil
}

// unifiedWanted lists the cgroup2 controllers the limits need; each one is
// enabled only when asked for, so an execution never pays for the others.
func (h *Host) unifiedWanted(lim Limits) []string {
	var ctls []string
	if lim.MemoryBytes > 0 && h.unifiedCtl["memory"] {
		ctls = append(ctls, "memory")
	}
	if lim.Pids > 0 && h.unifiedCtl["pids"] {
		ctls = append(ctls, "pids")
	}
	if lim.CPUWeight > 0 && h.unifiedCtl["cpu"] {
		ctls = append(ctls, "cpu")
	}
	return ctls
}

// makeTracking adds the v1 directories that stand in for cgroup2 features
// the host lacks: freezer for a group kill, cpuacct for CPU usage.
func (h *Host) makeTracking(c *Group) error {
	var err error
	if hier := h.v1["freezer"]; hier != "" && !c.canKill {
		if c.freezer, err = c.mkdir(hier); err != nil {
			return err
		}
	}
	if hier := h.v1["cpuacct"]; hier != "" && c.unified == "" {
		c.cpuacctV1, err = c.mkdir(hier)
	}
	return err
}

// limitMemory sets the memory ceiling and keeps swap from extending it;
// with bytes 0 the group only joins the memory hierarchy, so that a
// tenant's ceiling above it applies and its OOM kills are counted.
func (h *Host) limitMemory(c *Group, bytes int64) error {
	if h.unifiedCtl["memory"] {
		return setMemory(c.unified, true, bytes)
	}
	dir, err := c.mkdir(h.v1["memory"])
	if err != nil {
		return err
	}
	c.memoryV1 = dir
	return setMemory(dir, false, bytes)
}

// limitPids sets the ceiling on processes and threads; 0 joins only.
func (h *Host) limitPids(c *Group, n int64) error {
	if h.unifiedCtl["pids"] {
		return setPids(c.unified, n)
	}
	dir, err := c.mkdir(h.v1["pids"])
	if err != nil {
		return err
	}
	c.pidsV1 = dir
	return setPids(dir, n)
}

// limitCPU sets the CPU weight, translated to cpu.shares on v1; 0 joins
// only.
func (h *Host) limitCPU(c *Group, weight int) error {
	if h.unifiedCtl["cpu"] {
		return setCPU(c.unified, true, weight)
	}
	dir, err := c.mkdir(h.v1["cpu"])
	if err != nil {
		return err
	}
	return setCPU(dir, false, weight)
}

// setMemory writes a memory ceiling of bytes (0: none) into dir, a
// cgroup2 directory when v2 is set.
func setMemory(dir string, v2 bool, bytes int64) error {
	if bytes == 0 {
		return nil
	}
	v := strconv.FormatInt(bytes, 10)
	if v2 {
		if err := writeFile(dir, "memory.max", v); err != nil {
			return err
		}
		return writeIfExists(dir, "memory.swap.max", "0")
	}
	// memsw is memory+swap and must stay >= limit_in_bytes: it goes second
	// when the ceiling comes down (always, in a new group), first when it
	// goes up (a tenant's group kept from an earlier configuration).
	files := []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"}
	if bytes > readInt(dir, "memory.limit_in_bytes") {
		slices.Reverse(files)
	}
	for _, f := range files {
		write := writeFile
		if f == "memory.memsw.limit_in_bytes" {
			write = writeIfExists // only with swap accounting
		}
		if err := write(dir, f, v); err != nil {
			return err
		}
	}
	return nil
}

// setPids writes a pids ceiling of n (0: none) into dir.
func setPids(dir string, n int64) error {
	if n == 0 {
		return nil
	}
	return writeFile(dir, "pids.max", strconv.FormatInt(n, 10))
}

// setCPU writes a CPU weight (0: none) into dir, as cpu.shares on v1.
func setCPU(dir string, v2 bool, weight int) error {
	switch {
	case weight == 0:
		return nil
	case v2:
		return writeFile(dir, "cpu.weight", strconv.Itoa(weight))
	}
	return writeFile(dir, "cpu.shares", strconv.FormatInt(cpuShares(weight), 10))
}

// cpuShares maps a cgroup v2 weight (default 100) to v1 shares (default
// 1024), clamped to the range the kernel accepts.
func cpuShares(weight int) int64 {
	return min(max(int64(weight)*1024/100, 2), 262144)
}

// mkdir creates hier/<base>/<name>, and the shared directories above it
// when they are missing. A directory already made for a co-mounted
// controller is reused; one left by anyone else is an error, because
// sharing it would mix two executions.
func (c *Group) mkdir(hier string) (string, error) {
	dir := filepath.Join(hier, c.base, c.name)
	if slices.Contains(c.dirs, dir) {
		return dir, nil
	}
	err := os.Mkdir(dir, 0o755)
	if errors.Is(err, fs.ErrNotExist) { // the first group below base
		if _, err = ensure(hier, c.base); err == nil {
			err = os.Mkdir(dir, 0o755)
		}
	}
	if err != nil {
		return "", fmt.Errorf("cgroup: create %s: %w", dir, err)
	}
	c.dirs = append(c.dirs, dir)
	return dir, nil
}

// ensure creates the shared directories from hier down to
// hier/<base> (termgate, then a tenant's), which another execution may
// Create at the same moment, and returns them top down.
func ensure(hier, base string) ([]string, error) {
	var chain []string
	dir := hier
	for elem := range strings.SplitSeq(base, "/") {
		dir = filepath.Join(dir, elem)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("cgroup: create %s: %w", dir, err)
		}
		chain = append(chain, dir)
	}
	return chain, nil
}

// enable hands controller ctl down from the cgroup2 root through
// termgate/ (and a tenant's directory) to the execution. Failing here means the ceiling cannot be
// applied, so the error wraps ErrUnenforceable as well as the cause.
func enable(ctl string, dirs ...string) error {
	for _, dir := range dirs {
		if subtreeHas(dir, ctl) {
			continue // rewriting could fail (EBUSY) on a root holding processes
		}
		if err := writeFile(dir, "cgroup.subtree_control", "+"+ctl); err != nil {
			return fmt.Errorf("cgroup: enable %s controller: %w: %w", ctl, ErrUnenforceable, err)
		}
	}
	return nil
}

// subtreeHas reports whether dir already hands ctl to its children.
func subtreeHas(dir, ctl string) bool {
	data, _ := readControl(filepath.Join(dir, "cgroup.subtree_control"))
	return slices.Contains(strings.Fields(string(data)), ctl)
}

// Add moves pid into every directory of the group. The launcher calls it
// while bwrap is still blocked, so every descendant is born inside.
func (c *Group) Add(pid int) error { return c.AddExcept(pid, nil) }

// AddExcept is Add but for the directories pid was born in: forked into
// the cgroup2 one (CLONE_INTO_CGROUP, see Unified), or by a thread that
// had entered v1 ones (see V1), which need no move: a move takes the
// kernel's global lock on every process's cgroups for writing, which
// waits for forks and exits everywhere on the host (milliseconds on a
// busy one), while a fork into the group takes no such lock.
func (c *Group) AddExcept(pid int, placed []string) error {
	for _, dir := range c.dirs {
		if slices.Contains(placed, dir) {
			continue
		}
		if err := writeFile(dir, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// V1 lists the group's cgroup v1 directories, in creation order: those a
// thread can enter alone (v1thread) so that its child is born in them.
func (c *Group) V1() []string {
	var v1 []string
	for _, dir := range c.dirs {
		if dir != c.unified {
			v1 = append(v1, dir)
		}
	}
	return v1
}

// Unified returns the group's cgroup2 directory, "" when it has none: the
// one a process can be forked straight into.
func (c *Group) Unified() string { return c.unified }

// Events are counters of one execution, read to explain how it ended.
type Events struct {
	OOMKills    int64
	PidsMaxHits int64
	CPUUsage    time.Duration
}

// Events reads the counters now. A counter the host does not keep reads as
// zero: events explain an exit, they never cause one.
func (c *Group) Events() Events {
	var ev Events
	if c.memoryV1 != "" {
		ev.OOMKills = readKey(c.memoryV1, "memory.oom_control", "oom_kill")
	} else if c.unified != "" {
		ev.OOMKills = readKey(c.unified, "memory.events", "oom_kill")
	}
	if c.pidsV1 != "" {
		ev.PidsMaxHits = readKey(c.pidsV1, "pids.events", "max")
	} else if c.unified != "" {
		ev.PidsMaxHits = readKey(c.unified, "pids.events", "max")
	}
	// cgroup2 keeps cpu.stat even without the cpu controller, so it wins.
	if c.unified != "" {
		ev.CPUUsage = time.Duration(readKey(c.unified, "cpu.stat", "usage_usec")) * time.Microsecond
	} else if c.cpuacctV1 != "" {
		ev.CPUUsage = time.Duration(readInt(c.cpuacctV1, "cpuacct.usage"))
	}
	return ev
}

// Pids lists the processes in the group: the union over every directory,
// so a process that reached only some of them is still seen.
func (c *Group) Pids() []int {
	var all []int
	for _, dir := range c.dirs {
		all = append(all, readPids(dir)...)
	}
	slices.Sort(all)
	return slices.Compact(all)
}
