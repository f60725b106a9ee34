//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

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
var namePattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Bounds for the waits in kill and remove: a stuck cgroup must turn into an
// error, never a hang.
const (
	removeBudget = 2 * time.Second
	retryMax     = 200 * time.Millisecond
	freezePolls  = 100
	signalRounds = 50
	pollInterval = 10 * time.Millisecond
)

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
		if fsType(dir) != unix.CGROUP2_SUPER_MAGIC {
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
		if err != nil || fsType(dir) != unix.CGROUP_SUPER_MAGIC {
			continue
		}
		if marker != "" && !fileExists(dir, marker) {
			continue
		}
		h.v1[ctl] = dir
	}
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
	if !namePattern.MatchString(name) || name == "." || name == ".." {
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
	chain, err := ensure(h.unified, c.base)
	if err != nil {
		return err
	}
	for _, ctl := range h.unifiedWanted(lim) {
		if err := enable(ctl, append([]string{h.unified}, chain...)...); err != nil {
			return err
		}
	}
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

// mkdir creates hier/<base>/<name>. A directory already made for a
// co-mounted controller is reused; one left by anyone else is an error,
// because sharing it would mix two executions.
func (c *Group) mkdir(hier string) (string, error) {
	dir := filepath.Join(hier, c.base, c.name)
	if slices.Contains(c.dirs, dir) {
		return dir, nil
	}
	if _, err := ensure(hier, c.base); err != nil {
		return "", err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
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
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	return slices.Contains(strings.Fields(string(data)), ctl)
}

// Add moves pid into every directory of the group. The launcher calls it
// while bwrap is still blocked, so every descendant is born inside.
func (c *Group) Add(pid int) error {
	for _, dir := range c.dirs {
		if err := writeFile(dir, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

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

// Kill SIGKILLs every process in the group, by the most atomic means the
// host has. It is idempotent, and a no-op once remove has succeeded.
func (c *Group) Kill() error {
	if c.removed.Load() {
		return nil
	}
	if c.canKill {
		return c.killUnified()
	}
	if c.freezer != "" {
		frozen, err := c.killFrozen()
		if err == nil && frozen {
			return nil
		}
		if sweepErr := c.killEach(); sweepErr != nil {
			return errors.Join(err, sweepErr)
		}
		return nil
	}
	return c.killEach()
}

// killUnified uses cgroup.kill, which the kernel applies to the group and
// to anything forked meanwhile. A group already gone has nothing to kill.
func (c *Group) killUnified() error {
	err := writeFile(c.unified, "cgroup.kill", "1")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// killFrozen freezes the group so nothing can fork, signals every member
// and thaws it so the signals are delivered. It reports false when the
// freeze did not settle in time, and kill then sweeps with killEach.
func (c *Group) killFrozen() (bool, error) {
	if err := writeFile(c.freezer, "freezer.state", "FROZEN"); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return true, nil
		}
		return false, err
	}
	frozen := waitFrozen(c.freezer)
	signalAll(readPids(c.freezer))
	if err := writeFile(c.freezer, "freezer.state", "THAWED"); err != nil {
		return false, err
	}
	return frozen, nil
}

// waitFrozen polls until the v1 freezer settles, for a bounded time:
// freezing is asynchronous and a task in uninterruptible sleep delays it.
func waitFrozen(dir string) bool {
	for range freezePolls {
		data, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
		if err != nil || strings.TrimSpace(string(data)) == "FROZEN" {
			return err == nil
		}
		time.Sleep(pollInterval)
	}
	return false
}

// killEach is the last resort: signal the listed processes until the group
// is empty, a bounded number of times, since members may fork in between.
// A pid can be reused between listing and signalling; the window is the
// few microseconds after a member exits, which cgroup.kill and the freezer
// avoid and this fallback cannot.
func (c *Group) killEach() error {
	for range signalRounds {
		pids := c.Pids()
		if len(pids) == 0 {
			return nil
		}
		signalAll(pids)
		time.Sleep(pollInterval)
	}
	if left := c.Pids(); len(left) > 0 {
		return fmt.Errorf("cgroup: kill %s: %d processes survive", c.name, len(left))
	}
	return nil
}

// signalAll sends SIGKILL to each pid; one that already exited is fine.
func signalAll(pids []int) {
	for _, pid := range pids {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}

// Remove kills the group, deletes its directories, leaving the shared
// termgate parents, and drops its tenant's hold (once, even when a
// directory could not be removed). It is idempotent.
func (c *Group) Remove() error {
	if c.removed.Load() {
		return nil
	}
	killErr := c.Kill()
	err := c.rmdirAll()
	var releaseErr error
	if c.release != nil && c.released.CompareAndSwap(false, true) {
		releaseErr = c.release()
	}
	if err != nil {
		return errors.Join(killErr, err, releaseErr)
	}
	c.removed.Store(true)
	return releaseErr
}

// rmdirAll removes every directory, newest first, within one shared budget.
func (c *Group) rmdirAll() error {
	deadline := time.Now().Add(removeBudget)
	var errs []error
	for _, dir := range slices.Backward(c.dirs) {
		errs = append(errs, rmdir(dir, deadline))
	}
	return errors.Join(errs...)
}

// rmdir retries while the kernel still counts killed tasks as members
// (EBUSY), backing off until deadline. A missing directory is success.
func rmdir(dir string, deadline time.Time) error {
	delay := 5 * time.Millisecond
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().Add(delay).After(deadline) {
			return fmt.Errorf("cgroup: remove %s: %w", dir, err)
		}
		time.Sleep(delay)
		delay = min(delay*2, retryMax)
	}
}

// writeFile writes one control file. It never creates the file: a missing
// control file means a missing feature, not something to make up.
func writeFile(dir, file, value string) error {
	path := filepath.Join(dir, file)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(value)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is already in our message
		}
		return fmt.Errorf("cgroup: write %s: %w", path, err)
	}
	return nil
}

// writeIfExists writes a control file that only some kernels or
// configurations provide (swap accounting).
func writeIfExists(dir, file, value string) error {
	if !fileExists(dir, file) {
		return nil
	}
	return writeFile(dir, file, value)
}

// fileExists reports whether dir has the control file.
func fileExists(dir, file string) bool {
	_, err := os.Stat(filepath.Join(dir, file))
	return err == nil
}

// readKey reads the number after key in a "key value" per line file such
// as memory.events; absent file or key reads as zero.
func readKey(dir, file, key string) int64 {
	data, _ := os.ReadFile(filepath.Join(dir, file))
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// readInt reads a file holding a single number; absent reads as zero.
func readInt(dir, file string) int64 {
	data, _ := os.ReadFile(filepath.Join(dir, file))
	n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n
}

// readPids lists cgroup.procs; a directory already gone lists nothing.
func readPids(dir string) []int {
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// controllers reads the controllers a cgroup2 directory offers.
func controllers(dir string) map[string]bool {
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
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
