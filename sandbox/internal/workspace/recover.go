//go:build linux

package workspace

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// recover removes what a previous instance on this root left behind when
// it was killed: mounts under mnt/, loop devices bound to its images, and
// half-made images. With Adopt it first takes over the tenants' mounts and
// loop devices, which executions that outlived that instance still use
// (see adoptMounts and adoptLoops). Each item removed is logged and returned.
func (s *Store) recover() ([]string, error) {
	var removed []string
	loops, err := s.staleLoops()
	if err != nil {
		return nil, err
	}
	mounts, err := s.staleMounts()
	if err != nil {
		return nil, err
	}
	var inUse map[string]bool
	if s.cfg.Adopt {
		mounts, inUse = s.adoptMounts(mounts)
	}
	for _, m := range mounts {
		if err := unmount(m.target); err != nil {
			return removed, fmt.Errorf("workspace: remove stale mount: %w", err)
		}
		s.log.Warn("removed stale workspace mount", "mount", m.target, "source", m.source)
		removed = append(removed, "mount "+m.target+" ("+m.source+")")
	}
	if s.cfg.Adopt {
		var gone []string
		loops, gone, err = s.adoptLoops(loops, inUse)
		if removed = append(removed, gone...); err != nil {
			return removed, err
		}
	}
	for _, dev := range loops {
		if err := detachLoop(dev.name); err != nil {
			return removed, err
		}
		s.log.Warn("removed stale loop device", "device", dev.name, "image", dev.backing)
		removed = append(removed, "loop "+dev.name+" ("+dev.backing+")")
	}
	return append(removed, s.removeLeftovers()...), nil
}

type loopDev struct{ name, backing string }

// staleLoops lists the loop devices bound to files in images/, in order.
func (s *Store) staleLoops() ([]loopDev, error) {
	loops, err := boundLoops()
	if err != nil {
		return nil, err
	}
	prefix := filepath.Join(s.root, imagesDir) + "/"
	var out []loopDev
	for dev, backing := range loops {
		if strings.HasPrefix(backing, prefix) {
			out = append(out, loopDev{dev, backing})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// mountEntry is one line of /proc/self/mountinfo: its filesystem's device
// (maj:min), the root of that filesystem it shows, where, its per-mount
// options, and the filesystem's type and source.
type mountEntry struct{ dev, root, target, opts, fstype, source string }

// staleMounts lists the mounts below mnt/, deepest first, so nested ones
// go before those they sit on.
func (s *Store) staleMounts() ([]mountEntry, error) {
	all, err := readMountinfo("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	prefix := filepath.Join(s.root, mountsDir) + "/"
	var out []mountEntry
	for _, m := range all {
		if strings.HasPrefix(m.target, prefix) {
			out = append(out, m)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Count(out[i].target, "/") > strings.Count(out[j].target, "/")
	})
	return out, nil
}

// readMountinfo parses a mountinfo file (proc(5)).
func readMountinfo(name string) ([]mountEntry, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("workspace: read mounts: %w", err)
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if m, ok := parseMountinfo(sc.Text()); ok {
			out = append(out, m)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("workspace: read mounts: %w", err)
	}
	return out, nil
}

// parseMountinfo reads "id parent maj:min root target opts [tags] - fstype source super".
func parseMountinfo(line string) (mountEntry, bool) {
	fields := strings.Fields(line)
	sep := -1
	for i, f := range fields {
		if f == "-" && i >= 6 {
			sep = i
			break
		}
	}
	if sep < 0 || len(fields) < sep+3 {
		return mountEntry{}, false
	}
	return mountEntry{
		dev: fields[2], root: unescapeMount(fields[3]), target: unescapeMount(fields[4]), opts: fields[5],
		fstype: fields[sep+1], source: unescapeMount(fields[sep+2]),
	}, true
}

// unescapeMount undoes the kernel's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeLeftovers deletes half-made images and probe directories.
func (s *Store) removeLeftovers() []string {
	var removed []string
	patterns := []string{
		filepath.Join(s.root, imagesDir, "*.new"),
		filepath.Join(s.root, imagesDir, ".probe-*"),
		filepath.Join(s.root, mountsDir, ".probe-*"),
	}
	for _, p := range patterns {
		names, _ := filepath.Glob(p)
		for _, n := range names {
			if os.Remove(n) == nil {
				s.log.Warn("removed stale workspace file", "path", n)
				removed = append(removed, "file "+n)
			}
		}
	}
	return removed
}
