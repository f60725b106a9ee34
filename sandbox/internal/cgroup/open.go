//go:build linux

package cgroup

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Open returns the group of an execution that an earlier instance created
// at dirs (Group.Dirs, in creation order), so this one can kill, count and
// remove it: each directory must be <hierarchy>/<parent>/<name> of one of
// this host's hierarchies, with one name throughout. Nothing is created.
func (h *Host) Open(dirs []string) (*Group, error) {
	return h.openIn(h.parent, dirs)
}

// openIn is Open for a group directly below base.
func (h *Host) openIn(base string, dirs []string) (*Group, error) {
	if len(dirs) == 0 {
		return nil, fmt.Errorf("cgroup: open: no directories")
	}
	c := &Group{name: filepath.Base(dirs[0]), base: base}
	if err := ValidateName(c.name); err != nil {
		return nil, err
	}
	for _, dir := range dirs {
		if err := h.openDir(c, dir); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// openDir records dir in c by the hierarchy it is in.
func (h *Host) openDir(c *Group, dir string) error {
	hier, ok := h.hierarchyOf(dir, c)
	if !ok {
		return fmt.Errorf("cgroup: open %s: not %s/%s in a hierarchy of this host", dir, c.base, c.name)
	}
	c.dirs = append(c.dirs, dir)
	switch {
	case hier == h.unified:
		c.unified = dir
		c.canKill = fileExists(dir, "cgroup.kill")
	case hier == h.v1["freezer"]:
		c.freezer = dir
	}
	if hier == h.v1["memory"] {
		c.memoryV1 = dir
	}
	if hier == h.v1["pids"] {
		c.pidsV1 = dir
	}
	if hier == h.v1["cpuacct"] && h.unified == "" {
		c.cpuacctV1 = dir
	}
	return nil
}

// hierarchyOf returns the hierarchy dir is c's directory in.
func (h *Host) hierarchyOf(dir string, c *Group) (string, bool) {
	for _, hier := range h.hierarchies() {
		if filepath.Clean(dir) == filepath.Join(hier, c.base, c.name) && !strings.Contains(c.name, "/") {
			return hier, true
		}
	}
	return "", false
}

// Open returns the group of an execution of tenant that an earlier
// instance created at dirs, counting it as one of the tenant's, so the
// tenant's directory stays until it is removed.
func (ts *Tenants) Open(tenant string, dirs []string) (*Group, error) {
	if err := ValidateTenant(tenant); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	c, err := ts.host.openIn(ts.base(tenant), dirs)
	if err != nil {
		return nil, err
	}
	ts.mu.Lock()
	ts.refs[tenant]++
	ts.mu.Unlock()
	c.release = func() error { return ts.release(tenant) }
	return c, nil
}
