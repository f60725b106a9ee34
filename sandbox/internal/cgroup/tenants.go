//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"
)

// tenantPrefix keeps a tenant's directory apart from the executions'
// (x and 16 hex digits) beside it, whatever the tenant is called.
const tenantPrefix = "tenant-"

// tenantPattern is the gateway's tenant syntax: one path element, never
// "." or "..", safe as a cgroup name after the prefix.
var tenantPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`) })

// ValidateTenant rejects a tenant that could not name its own directory.
func ValidateTenant(tenant string) error {
	if !tenantPattern().MatchString(tenant) {
		return fmt.Errorf("tenant %q must match %s", tenant, tenantPattern())
	}
	return nil
}

// or fills each ceiling l does not ask for with o's: the hierarchies a
// tenant's execution must join.
func (l Limits) or(o Limits) Limits {
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

// Tenants keeps one directory per tenant with executions, in every
// hierarchy, above those executions' own: <parent>/tenant-<name>/<exec>.
// A tenant's directory is made (or adopted, and its ceilings rewritten)
// with its first execution and removed after its last; the count of
// executions is this launcher's, which the cgroup lock makes the only
// one using the parent, so no other start can race a removal.
type Tenants struct {
	host *Host
	lim  Limits
	mu   sync.Mutex
	refs map[string]int // executions holding each tenant's directories
}

// NewTenants returns an empty set applying lim to every tenant.
func NewTenants(h *Host, lim Limits) *Tenants {
	return &Tenants{host: h, lim: lim, refs: map[string]int{}}
}

// Limits returns the ceilings every tenant's directory gets.
func (ts *Tenants) Limits() Limits { return ts.lim }

// base is the path from a hierarchy's root to tenant's directory.
func (ts *Tenants) base(tenant string) string {
	return ts.host.parent + "/" + tenantPrefix + tenant
}

// Create makes the group of execution name inside tenant's directory,
// under the tenant's ceilings and its own lim.
func (ts *Tenants) Create(tenant, name string, lim Limits) (*Group, error) {
	if err := ValidateTenant(tenant); err != nil {
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
func (ts *Tenants) acquire(tenant string) error {
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
func (ts *Tenants) release(tenant string) error {
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
func (h *Host) limitTenant(base string, lim Limits) error {
	if h.unified != "" {
		if err := h.limitTenantUnified(base, lim); err != nil {
			return err
		}
	}
	if !h.unifiedCtl["memory"] {
		if err := h.limitTenantV1("memory", base, lim.MemoryBytes > 0, func(dir string) error {
			return setMemory(dir, false, lim.MemoryBytes)
		}); err != nil {
			return err
		}
	}
	if !h.unifiedCtl["pids"] {
		if err := h.limitTenantV1("pids", base, lim.Pids > 0, func(dir string) error {
			return setPids(dir, lim.Pids)
		}); err != nil {
			return err
		}
	}
	if !h.unifiedCtl["cpu"] {
		return h.limitTenantV1("cpu", base, lim.CPUWeight > 0, func(dir string) error {
			return setCPU(dir, false, lim.CPUWeight)
		})
	}
	return nil
}

// limitTenantUnified writes the ceilings whose controllers the cgroup2
// tree has, handing each down to the tenant's directory first.
func (h *Host) limitTenantUnified(base string, lim Limits) error {
	chain, err := ensure(h.unified, base)
	if err != nil {
		return err
	}
	above := append([]string{h.unified}, chain[:len(chain)-1]...)
	for _, ctl := range h.unifiedWanted(lim) {
		if err := enable(ctl, above...); err != nil {
			return err
		}
	}
	dir := chain[len(chain)-1]
	if !h.unifiedCtl["memory"] && !h.unifiedCtl["pids"] && !h.unifiedCtl["cpu"] {
		return nil
	}
	errs := []error{clearUnlimited(dir)}
	if h.unifiedCtl["memory"] {
		errs = append(errs, setMemory(dir, true, lim.MemoryBytes))
	}
	if h.unifiedCtl["pids"] {
		errs = append(errs, setPids(dir, lim.Pids))
	}
	if h.unifiedCtl["cpu"] {
		errs = append(errs, setCPU(dir, true, lim.CPUWeight))
	}
	return errors.Join(errs...)
}

// limitTenantV1 makes the tenant's directory in v1 hierarchy ctl when
// want is set and writes it with set; without want it only resets a
// directory found there to no ceiling.
func (h *Host) limitTenantV1(ctl, base string, want bool, set func(string) error) error {
	hier := h.v1[ctl]
	if hier == "" {
		return nil // checkEnforceable refused what needs it
	}
	dir := filepath.Join(hier, base)
	if !want {
		if fileExists(dir, "cgroup.procs") {
			return resetV1(dir, ctl)
		}
		return nil
	}
	if _, err := ensure(hier, base); err != nil {
		return err
	}
	if ctl == "memory" && fileExists(dir, "memory.use_hierarchy") && readInt(dir, "memory.use_hierarchy") != 1 {
		return fmt.Errorf("cgroup: %s: memory.use_hierarchy is 0, so a tenant's ceiling would not hold its executions: %w", dir, ErrUnenforceable)
	}
	return set(dir)
}

// clearUnlimited lifts every cgroup2 ceiling of dir that exists, so
// that only what the tenant asks for now remains after the writes.
func clearUnlimited(dir string) error {
	return errors.Join(
		writeIfExists(dir, "memory.max", "max"),
		writeIfExists(dir, "pids.max", "max"),
		writeIfExists(dir, "cpu.weight", "100"),
	)
}

// resetV1 lifts the v1 ceiling of controller ctl in dir.
func resetV1(dir, ctl string) error {
	switch ctl {
	case "memory":
		// Going up: memsw (memory+swap) first.
		return errors.Join(
			writeIfExists(dir, "memory.memsw.limit_in_bytes", "-1"),
			writeIfExists(dir, "memory.limit_in_bytes", "-1"),
		)
	case "pids":
		return writeIfExists(dir, "pids.max", "max")
	case "cpu":
		return writeIfExists(dir, "cpu.shares", "1024")
	}
	return nil
}

// rmdirTenant removes the tenant's directory at base in every hierarchy,
// trying each once: it runs under the lock every tenant's start takes, so
// it must not wait. One that still holds an execution (whose removal
// failed) stays, and the error says so; the tenant's next first execution
// adopts it, the next sweep removes it.
func (h *Host) rmdirTenant(base string) error {
	deadline := time.Now()
	var errs []error
	for _, hier := range h.hierarchies() {
		errs = append(errs, rmdir(filepath.Join(hier, base), deadline))
	}
	return errors.Join(errs...)
}

// hierarchies lists every hierarchy termgate uses, each once (co-mounted
// v1 controllers share one), the cgroup2 tree first.
func (h *Host) hierarchies() []string {
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
