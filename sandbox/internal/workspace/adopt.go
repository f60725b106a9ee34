//go:build linux

package workspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// adoptMounts takes over each tenant's mount that is what the layout says
// it is (see checkMount) and returns the other mounts, to be removed, and
// the loop devices of those adopted. A mount point with more than one
// mount is not adopted: what sits on top of a workspace is not the
// Store's.
func (s *Store) adoptMounts(mounts []mountEntry) (rest []mountEntry, loops map[string]bool) {
	loops = map[string]bool{}
	at := map[string]int{}
	for _, m := range mounts {
		at[m.target]++
	}
	byPath := s.tenantsByPath()
	for _, m := range mounts {
		t := byPath[m.target]
		var err error
		switch {
		case t == nil:
			err = errors.New("no tenant's workspace")
		case at[m.target] > 1:
			err = fmt.Errorf("%d mounts on one workspace", at[m.target])
		default:
			err = checkMount(m, t.imagePath(s.root))
		}
		if err != nil {
			s.log.Warn("workspace mount not adopted", "mount", m.target, "source", m.source, "err", err)
			rest = append(rest, m)
			continue
		}
		loops[m.source] = true
		s.adopted = append(s.adopted, "mount "+m.target+" ("+m.source+")")
		s.log.Info("workspace mount adopted", "mount", m.target, "source", m.source, "uid", t.UID, "id", t.ID)
	}
	return rest, loops
}

// tenantsByPath maps each mount point of a tenant's image to the tenant.
func (s *Store) tenantsByPath() map[string]*tenantState {
	out := make(map[string]*tenantState, len(s.st.Tenants))
	for _, t := range s.st.Tenants {
		if t.Image {
			out[t.path(s.root)] = t
		}
	}
	return out
}

// checkMount verifies that m is a workspace mount of image: the root of an
// ext4 filesystem, mounted nodev,nosuid, from a loop device that is the
// filesystem's device and is bound to image (the same file, not one of
// its name).
func checkMount(m mountEntry, image string) error {
	switch {
	case m.fstype != "ext4" || m.root != "/":
		return fmt.Errorf("%s of %s is not the root of an ext4 filesystem", m.root, m.fstype)
	case !hasOpts(m.opts, "nodev", "nosuid"):
		return fmt.Errorf("mounted %s, without nodev,nosuid", m.opts)
	case !strings.HasPrefix(m.source, "/dev/loop"):
		return errors.New("not mounted from a loop device")
	}
	f, err := openLoopOf(m.source, image)
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("stat %s: %w", m.source, err)
	}
	if dev := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)); dev != m.dev {
		return fmt.Errorf("the filesystem is on device %s, %s is %s", m.dev, m.source, dev)
	}
	return nil
}

// hasOpts reports whether the comma-separated mount options hold each of want.
func hasOpts(opts string, want ...string) bool {
	have := strings.Split(opts, ",")
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// adoptLoops keeps the loop devices of tenants' images that are in use,
// one an image, and returns the others, to be removed. In use is the
// device of an adopted mount (mounted), or one that stays bound when asked
// to detach: mounted only in the sandboxes of executions that outlived
// the last instance, it detaches itself when its last user goes
// (LO_FLAGS_AUTOCLEAR). The next Prepare of its tenant mounts that device
// rather than a second one, which would put a second filesystem on the
// image. A device bound to an image mounted nowhere detaches at once and
// is listed in removed.
func (s *Store) adoptLoops(loops []loopDev, mounted map[string]bool) (rest []loopDev, removed []string, err error) {
	images := make(map[string]*tenantState, len(s.st.Tenants))
	for _, t := range s.st.Tenants {
		if t.Image {
			images[t.imagePath(s.root)] = t
		}
	}
	kept := map[string]string{}
	for _, l := range loops {
		t := images[l.backing]
		err := errors.New("no tenant's image")
		if t != nil {
			err = checkLoop(l.name, l.backing)
		}
		if err == nil && kept[l.backing] != "" {
			err = fmt.Errorf("the image is on %s too", kept[l.backing])
			s.log.Error("workspace image on two loop devices", "image", l.backing, "devices", []string{kept[l.backing], l.name})
		}
		if err != nil {
			s.log.Warn("workspace loop device not adopted", "device", l.name, "image", l.backing, "err", err)
			rest = append(rest, l)
			continue
		}
		if !mounted[l.name] {
			if err := detachLoop(l.name); err != nil {
				return rest, removed, err
			}
			if checkLoop(l.name, l.backing) != nil { // it was in use by nothing
				s.log.Warn("removed stale loop device", "device", l.name, "image", l.backing)
				removed = append(removed, "loop "+l.name+" ("+l.backing+")")
				continue
			}
		}
		kept[l.backing] = l.name
		s.adopted = append(s.adopted, "loop "+l.name+" ("+l.backing+")")
		s.log.Info("workspace loop device adopted", "device", l.name, "image", l.backing, "uid", t.UID, "id", t.ID, "mounted_here", mounted[l.name])
	}
	return rest, removed, nil
}

// checkLoop verifies that dev is bound to image, the file itself.
func checkLoop(dev, image string) error {
	f, err := openLoopOf(dev, image)
	if err != nil {
		return err
	}
	return f.Close()
}

// openLoopOf opens the loop device dev and verifies that it is bound to
// image: the same inode of the same filesystem, not merely a file of that
// name. Held open, the device cannot detach itself (LO_FLAGS_AUTOCLEAR)
// and be bound to another file.
func openLoopOf(dev, image string) (*os.File, error) {
	if filepath.Dir(dev) != "/dev" || !strings.HasPrefix(filepath.Base(dev), "loop") {
		return nil, fmt.Errorf("%s is not a loop device", dev)
	}
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dev, err)
	}
	info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s is not bound: %w", dev, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(image, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("stat image: %w", err)
	}
	if info.Inode != st.Ino || info.Device != st.Dev {
		f.Close()
		return nil, fmt.Errorf("%s is bound to inode %d of device %#x, not to %s", dev, info.Inode, info.Device, image)
	}
	return f, nil
}
