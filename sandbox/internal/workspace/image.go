//go:build linux

package workspace

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mountFlags are the options of every workspace mount: no device nodes
// and no set-id programs from a filesystem a tenant writes.
const mountFlags = unix.MS_NODEV | unix.MS_NOSUID | unix.MS_NOATIME

// loopAttempts bounds the retries when another process takes the free
// loop device between LOOP_CTL_GET_FREE and LOOP_CONFIGURE.
const loopAttempts = 8

// findMkfs resolves mkfs.ext4, or fails wrapping ErrUnenforceable.
func findMkfs(name string) (string, error) {
	if name == "" {
		name = "mkfs.ext4"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: workspace quotas need mkfs.ext4 (Debian: apt-get install e2fsprogs): %w", ErrUnenforceable, err)
	}
	return p, nil
}

// probe makes, mounts and removes an image of the configured quota, as a
// tenant's first start would, so a host that cannot apply quotas, or a
// quota mkfs.ext4 refuses (too many inodes for the size), fails at Open
// rather than at every tenant's first start. The image is sparse: mkfs
// writes a few MiB of it.
func (s *Store) probe() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: workspace quotas need root (loop devices and mounts)", ErrUnenforceable)
	}
	if err := s.makeDirs(); err != nil {
		return err
	}
	name := ".probe-" + newID()
	image := filepath.Join(s.root, imagesDir, name+".img")
	mp := filepath.Join(s.root, mountsDir, name)
	defer os.Remove(image)
	if err := s.createImage(image, s.cfg.Bytes, s.cfg.Inodes, 0, 0); err != nil {
		return fmt.Errorf("workspace: a quota of %d bytes and %s: %w", s.cfg.Bytes, inodesText(s.cfg.Inodes), err)
	}
	if err := os.Mkdir(mp, 0o700); err != nil {
		return fmt.Errorf("workspace: probe: %w", err)
	}
	defer os.Remove(mp)
	if err := mountLoop(image, mp); err != nil {
		return err
	}
	if err := unmount(mp); err != nil {
		return fmt.Errorf("workspace: probe: %w", err)
	}
	return nil
}

// inodesText says how many inodes a quota has.
func inodesText(n int64) string {
	if n == 0 {
		return "mkfs's count of inodes"
	}
	return strconv.FormatInt(n, 10) + " inodes"
}

// makeDirs makes images/ (0700: images hold every tenant's files) and mnt/.
func (s *Store) makeDirs() error {
	for _, d := range []struct {
		name string
		mode os.FileMode
	}{{imagesDir, 0o700}, {mountsDir, 0o711}} {
		p := filepath.Join(s.root, d.name)
		if err := os.Mkdir(p, d.mode); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("workspace: create %s: %w", p, err)
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return fmt.Errorf("workspace: chmod %s: %w", p, err)
		}
	}
	return nil
}

// mountImage mounts the tenant's image at its mount point, making the
// image first when there is none. A mounted image is left as it is.
func (s *Store) mountImage(t *tenantState) error {
	mp := t.path(s.root)
	if mounted(mp) {
		return nil
	}
	if err := s.makeDirs(); err != nil {
		return err
	}
	if err := os.Mkdir(mp, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("workspace: create %s: %w", mp, err)
	}
	image := t.imagePath(s.root)
	fresh := false
	if _, err := os.Lstat(image); errors.Is(err, os.ErrNotExist) {
		if err := s.createImage(image, t.Bytes, t.Inodes, t.UID, t.GID); err != nil {
			return err
		}
		fresh = true
	}
	if err := mountLoop(image, mp); err != nil {
		return err
	}
	if fresh {
		os.Remove(filepath.Join(mp, "lost+found")) // mkfs's, owned by root: not the tenant's
	}
	if err := own(mp, t); err != nil {
		unmount(mp)
		return err
	}
	s.log.Info("workspace mounted", "uid", t.UID, "id", t.ID)
	return nil
}

// createImage makes a sparse ext4 image of size bytes with inodes inodes
// (0: mkfs's choice) whose root belongs to uid:gid. It is built under a
// temporary name and renamed into place, so an image that exists is whole.
func (s *Store) createImage(image string, size, inodes int64, uid, gid uint32) error {
	tmp := image + ".new"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("workspace: create image: %w", err)
	}
	err = f.Truncate(size)
	f.Close()
	if err == nil {
		err = s.runMkfs(tmp, inodes, uid, gid)
	}
	if err == nil {
		err = syncFile(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, image)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(image))
}

// runMkfs formats the image: no blocks reserved for root, the root
// directory owned by the tenant, no zeroing of a file that is all holes.
func (s *Store) runMkfs(image string, inodes int64, uid, gid uint32) error {
	args := []string{"-q", "-F", "-m", "0", "-E", fmt.Sprintf("root_owner=%d:%d,nodiscard,assume_storage_prezeroed=1", uid, gid)}
	if inodes > 0 {
		args = append(args, "-N", strconv.FormatInt(inodes, 10))
	}
	cmd := exec.Command(s.mkfs, append(args, image)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s: %w: %s", ErrUnenforceable, s.mkfs, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func syncFile(name string) error {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("workspace: sync image: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("workspace: sync image: %w", err)
	}
	return nil
}

// mountLoop mounts image at mp through a loop device: the one already
// bound to the image when there is one (a second device would put two
// filesystems on one image), otherwise a new one that detaches itself
// when its last mount goes (LO_FLAGS_AUTOCLEAR).
func mountLoop(image, mp string) error {
	dev, f, err := loopFor(image)
	if err != nil {
		return err
	}
	defer f.Close() // after the mount: closing an unmounted autoclear device detaches it
	if err := unix.Mount(dev, mp, "ext4", mountFlags, ""); err != nil {
		return fmt.Errorf("%w: mount %s on %s: %w", ErrUnenforceable, dev, mp, err)
	}
	return nil
}

// loopFor returns a loop device bound to image, open: the one already
// bound to it, checked to be the image itself and held so that it cannot
// detach itself and be bound to another file before the mount, or else a
// new one.
func loopFor(image string) (string, *os.File, error) {
	loops, err := boundLoops()
	if err != nil {
		return "", nil, err
	}
	for dev, backing := range loops {
		if backing != image {
			continue
		}
		if f, err := openLoopOf(dev, image); err == nil {
			return dev, f, nil
		}
	}
	f, err := attachLoop(image)
	if err != nil {
		return "", nil, err
	}
	return f.Name(), f, nil
}

// attachLoop binds image to a free loop device.
func attachLoop(image string) (*os.File, error) {
	backing, err := os.OpenFile(image, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("workspace: open image: %w", err)
	}
	defer backing.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: loop devices: %w", ErrUnenforceable, err)
	}
	defer ctl.Close()
	for range loopAttempts {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("%w: find a free loop device: %w", ErrUnenforceable, err)
		}
		dev, err := os.OpenFile("/dev/loop"+strconv.Itoa(n), os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("%w: open loop device: %w", ErrUnenforceable, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(backing.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], image)
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("%w: configure loop device: %w", ErrUnenforceable, err)
		}
	}
	return nil, fmt.Errorf("%w: every free loop device was taken %d times in a row", ErrUnenforceable, loopAttempts)
}

// boundLoops maps each bound loop device (/dev/loopN) to its backing file,
// as the kernel names it: a file deleted since ends in " (deleted)", so it
// never matches the image made again at the same path.
func boundLoops() (map[string]string, error) {
	names, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, fmt.Errorf("workspace: list loop devices: %w", err)
	}
	out := map[string]string{}
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			continue // detached meanwhile
		}
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(n)))
		out[dev] = strings.TrimSuffix(string(data), "\n")
	}
	return out, nil
}

// detachLoop unbinds a loop device; one still in use detaches when its
// last user goes. A device already free is no error.
func detachLoop(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("workspace: open %s: %w", dev, err)
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("workspace: detach %s: %w", dev, err)
	}
	return nil
}

// mounted reports whether dir is a mount point: its device differs from
// its parent's.
func mounted(dir string) bool {
	var a, b unix.Stat_t
	if unix.Lstat(dir, &a) != nil || unix.Lstat(filepath.Dir(dir), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

// unmount unmounts mp; when it is busy (a sandbox's cwd, say), it is
// detached and goes when its last user does.
func unmount(mp string) error {
	err := unix.Unmount(mp, unix.UMOUNT_NOFOLLOW)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(mp, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	}
	if err != nil {
		return fmt.Errorf("unmount %s: %w", mp, err)
	}
	return nil
}

// unmountAll unmounts every mounted image of the Store.
func (s *Store) unmountAll() error {
	var errs []error
	for _, t := range s.st.Tenants {
		if mp := t.path(s.root); t.Image && mounted(mp) {
			errs = append(errs, unmount(mp))
		}
	}
	return errors.Join(errs...)
}
