//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"
)

// tenantDirPrefix keeps a tenant's directory apart from the executions'
// (x and 16 hex digits) beside it, whatever the tenant is called.
const tenantDirPrefix = "tenant-"

// tenantPattern is the gateway's tenant syntax: one path element, never
// "." or "..", safe as a cgroup name after the prefix.
var tenantPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// validateTenant rejects a tenant that could not name its own directory.
func validateTenant(tenant string) error {
	if !tenantPattern.MatchString(tenant) {
		return fmt.Errorf("tenant %q must match %s", tenant, tenantPattern)
	}
	return nil
}

// tenantLimits turns Config.TenantLimits into the ceilings of a tenant's
// cgroup. Only cgroup ceilings can bound a tenant as a whole: an rlimit
// is per process, so asking for one here is an error, not a no-op.
func tenantLimits(l Limits) (cgroupLimits, error) {
	lim := cgroupLimits{MemoryBytes: l.Memory, Pids: l.Pids, CPUWeight: l.CPUWeight}
	switch {
	case l.CPUSeconds != 0 || l.AddressSpace != 0 || l.FileSize != 0 || l.OpenFiles != 0:
		return lim, errors.New("only memory, pids and cpu weight apply to a tenant")
	case l.Memory < 0 || l.Memory != 0 && l.Memory < minMemory:
		return lim, fmt.Errorf("memory %d is below the minimum %d", l.Memory, minMemory)
	case l.Pids < 0 || l.Pids != 0 && l.Pids < minPids:
		return lim, fmt.Errorf("pids %d is below the minimum %d", l.Pids, minPids)
	}
	return lim, lim.validate()
}

// or fills each ceiling l does not ask for with o's: the hierarchies a
// tenant's execution must join.
func (l cgroupLimits) or(o cgroupLimits) cgroupLimits {
	if l.MemoryBytes == 0 {
		l.MemoryBytes = o.MemoryBytes
	}
	if l.Pids == 0 {
		l.Pids = o.Pids
	}
	if l.CPUWeight == 0 {
		l.CPUWeight = o.CPUWeight
	}
	return l
}

// tenantCgroups keeps one directory per tenant with executions, in every
// hierarchy, above those executions' own: <parent>/tenant-<name>/<exec>.
// A tenant's directory is made (or adopted, and its ceilings rewritten)
// with its first execution and removed after its last; the count of
// executions is this launcher's, which the cgroup lock makes the only
// one using the parent, so no other start can race a removal.
type tenantCgroups struct {
	host *cgroupHost
	lim  cgroupLimits
	mu   sync.Mutex
	refs map[string]int // executions holding each tenant's directories
}

// newTenantCgroups returns an empty set applying lim to every tenant.
func newTenantCgroups(h *cgroupHost, lim cgroupLimits) *tenantCgroups {
	return &tenantCgroups{host: h, lim: lim, refs: map[string]int{}}
}

// base is the path from a hierarchy's root to tenant's directory.
func (ts *tenantCgroups) base(tenant string) string {
	return ts.host.parent + "/" + tenantDirPrefix + tenant
}

// create makes the group of execution name inside tenant's directory,
// under the tenant's ceilings and its own lim.
func (ts *tenantCgroups) create(tenant, name string, lim cgroupLimits) (*execCgroup, error) {
	if err := validateTenant(tenant); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	if err := ts.acquire(tenant); err != nil {
		return nil, fmt.Errorf("tenant %s: %w", tenant, err)
	}
	c, err := ts.host.createIn(ts.base(tenant), name, lim, lim.or(ts.lim))
	if err != nil {
		return nil, errors.Join(err, ts.release(tenant))
	}
	c.release = func() error { return ts.release(tenant) }
	return c, nil
}

// acquire counts one more execution of tenant, preparing the tenant's
// directories for the first one. A ceiling the host cannot apply fails
// before anything is made.
func (ts *tenantCgroups) acquire(tenant string) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.refs[tenant] == 0 {
		if err := ts.host.checkEnforceable(ts.lim); err != nil {
			return err
		}
		if err := ts.host.limitTenant(ts.base(tenant), ts.lim); err != nil {
			return errors.Join(err, ts.host.rmdirTenant(ts.base(tenant)))
		}
	}
	ts.refs[tenant]++
	return nil
}

// release counts one execution of tenant less and removes the tenant's
// directories after its last.
func (ts *tenantCgroups) release(tenant string) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.refs[tenant]--; ts.refs[tenant] > 0 {
		return nil
	}
	delete(ts.refs, tenant)
	return ts.host.rmdirTenant(ts.base(tenant))
}

// limitTenant makes the tenant's directory at base in the cgroup2 tree
// (a tenant-wide cgroup.kill) and in each hierarchy lim needs, and writes
// lim there. A ceiling the tenant no longer asks for is lifted where an
// earlier configuration left the directory behind.
func (h *cgroupHost) limitTenant(base string, lim cgroupLimits) error {
	if h.unified != "" {
		if err := h.limitTenantUnified(base, lim); err != nil {
			return err
		}
	}
	if !h.unifiedCtl["memory"] {
		if err := h.limitTenantV1("memory", base, lim.MemoryBytes > 0, func(dir string) error {
			return cgroupSetMemory(dir, false, lim.MemoryBytes)
		}); err != nil {
			return err
		}
	}
	if !h.unifiedCtl["pids"] {
		if err := h.limitTenantV1("pids", base, lim.Pids > 0, func(dir string) error {
			return cgroupSetPids(dir, lim.Pids)
		}); err != nil {
			return err
		}
	}
	if !h.unifiedCtl["cpu"] {
		return h.limitTenantV1("cpu", base, lim.CPUWeight > 0, func(dir string) error {
			return cgroupSetCPU(dir, false, lim.CPUWeight)
		})
	}
	return nil
}

// limitTenantUnified writes the ceilings whose controllers the cgroup2
// tree has, handing each down to the tenant's directory first.
func (h *cgroupHost) limitTenantUnified(base string, lim cgroupLimits) error {
	chain, err := cgroupEnsure(h.unified, base)
	if err != nil {
		return err
	}
	above := append([]string{h.unified}, chain[:len(chain)-1]...)
	for _, ctl := range h.unifiedWanted(lim) {
		if err := cgroupEnable(ctl, above...); err != nil {
			return err
		}
	}
	dir := chain[len(chain)-1]
	if !h.unifiedCtl["memory"] && !h.unifiedCtl["pids"] && !h.unifiedCtl["cpu"] {
		return nil
	}
	errs := []error{cgroupClearUnlimited(dir)}
	if h.unifiedCtl["memory"] {
		errs = append(errs, cgroupSetMemory(dir, true, lim.MemoryBytes))
	}
	if h.unifiedCtl["pids"] {
		errs = append(errs, cgroupSetPids(dir, lim.Pids))
	}
	if h.unifiedCtl["cpu"] {
		errs = append(errs, cgroupSetCPU(dir, true, lim.CPUWeight))
	}
	return errors.Join(errs...)
}

// limitTenantV1 makes the tenant's directory in v1 hierarchy ctl when
// want is set and writes it with set; without want it only resets a
// directory found there to no ceiling.
func (h *cgroupHost) limitTenantV1(ctl, base string, want bool, set func(string) error) error {
	hier := h.v1[ctl]
	if hier == "" {
		return nil // checkEnforceable refused what needs it
	}
	dir := filepath.Join(hier, base)
	if !want {
		if cgroupFileExists(dir, "cgroup.procs") {
			return cgroupResetV1(dir, ctl)
		}
		return nil
	}
	if _, err := cgroupEnsure(hier, base); err != nil {
		return err
	}
	if ctl == "memory" && cgroupFileExists(dir, "memory.use_hierarchy") && cgroupInt(dir, "memory.use_hierarchy") != 1 {
		return fmt.Errorf("cgroup: %s: memory.use_hierarchy is 0, so a tenant's ceiling would not hold its executions: %w", dir, ErrUnenforceable)
	}
	return set(dir)
}

// cgroupClearUnlimited lifts every cgroup2 ceiling of dir that exists, so
// that only what the tenant asks for now remains after the writes.
func cgroupClearUnlimited(dir string) error {
	return errors.Join(
		cgroupWriteIfExists(dir, "memory.max", "max"),
		cgroupWriteIfExists(dir, "pids.max", "max"),
		cgroupWriteIfExists(dir, "cpu.weight", "100"),
	)
}

// cgroupResetV1 lifts the v1 ceiling of controller ctl in dir.
func cgroupResetV1(dir, ctl string) error {
	switch ctl {
	case "memory":
		// Going up: memsw (memory+swap) first.
		return errors.Join(
			cgroupWriteIfExists(dir, "memory.memsw.limit_in_bytes", "-1"),
			cgroupWriteIfExists(dir, "memory.limit_in_bytes", "-1"),
		)
	case "pids":
		return cgroupWriteIfExists(dir, "pids.max", "max")
	case "cpu":
		return cgroupWriteIfExists(dir, "cpu.shares", "1024")
	}
	return nil
}

// rmdirTenant removes the tenant's directory at base in every hierarchy,
// trying each once: it runs under the lock every tenant's start takes, so
// it must not wait. One that still holds an execution (whose removal
// failed) stays, and the error says so; the tenant's next first execution
// adopts it, the next sweep removes it.
func (h *cgroupHost) rmdirTenant(base string) error {
	deadline := time.Now()
	var errs []error
	for _, hier := range h.hierarchies() {
		errs = append(errs, cgroupRmdir(filepath.Join(hier, base), deadline))
	}
	return errors.Join(errs...)
}

// hierarchies lists every hierarchy termgate uses, each once (co-mounted
// v1 controllers share one), the cgroup2 tree first.
func (h *cgroupHost) hierarchies() []string {
	var v1 []string
	for _, dir := range h.v1 {
		v1 = append(v1, dir)
	}
	slices.Sort(v1)
	v1 = slices.Compact(v1)
	if h.unified != "" {
		return append([]string{h.unified}, v1...)
	}
	return v1
}
