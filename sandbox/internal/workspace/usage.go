//go:build linux

package workspace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"
)

// Usage is how much of its quota a workspace uses. Allowed figures are 0
// for a workspace without a quota.
type Usage struct {
	BytesUsed     int64 `json:"bytes_used"`
	BytesAllowed  int64 `json:"bytes_allowed"`
	InodesUsed    int64 `json:"inodes_used"`
	InodesAllowed int64 `json:"inodes_allowed"`
	// Mounted says whether the image is mounted now; an unmounted image is
	// read from its superblock.
	Mounted bool `json:"mounted"`
}

// Entry describes one tenant's workspace for the operator.
type Entry struct {
	Tenant string `json:"tenant"`
	UID    uint32 `json:"uid"`
	GID    uint32 `json:"gid"`
	Path   string `json:"path"`
	Quota  bool   `json:"quota"` // the workspace is a size-capped image
	Usage  Usage  `json:"usage"`
}

// Usage reports the tenant's workspace usage.
func (s *Store) Usage(tenant string) (Usage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.st.Tenants[tenant]
	if !ok {
		return Usage{}, fmt.Errorf("workspace: tenant %q has no workspace", tenant)
	}
	return usageOf(s.root, t)
}

// List describes every workspace of the Store, by tenant name.
func (s *Store) List() ([]Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return list(s.root, s.st)
}

// List describes every workspace under root without taking the root: a
// running server may hold it. It changes nothing.
func List(root string) ([]Entry, error) {
	resolved, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("workspace: resolve root: %w", err)
	}
	st, err := loadState(resolved)
	if err != nil {
		return nil, err
	}
	return list(resolved, st)
}

func list(root string, st state) ([]Entry, error) {
	out := make([]Entry, 0, len(st.Tenants))
	for name, t := range st.Tenants {
		u, err := usageOf(root, t)
		if err != nil {
			return nil, fmt.Errorf("workspace: tenant %q: %w", name, err)
		}
		out = append(out, Entry{Tenant: name, UID: t.UID, GID: t.GID, Path: t.path(root), Quota: t.Image, Usage: u})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out, nil
}

func usageOf(root string, t *tenantState) (Usage, error) {
	switch {
	case !t.Image:
		return dirUsage(t.path(root))
	case mounted(t.path(root)):
		return statfsUsage(t.path(root))
	}
	return imageUsage(t.imagePath(root))
}

// statfsUsage reads a mounted filesystem's figures: what the tenant can
// store, metadata excluded.
func statfsUsage(dir string) (Usage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return Usage{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	bs := int64(st.Bsize)
	return Usage{
		BytesUsed: int64(st.Blocks-st.Bfree) * bs, BytesAllowed: int64(st.Blocks) * bs,
		InodesUsed: int64(st.Files - st.Ffree), InodesAllowed: int64(st.Files), Mounted: true,
	}, nil
}

// imageUsage reads the figures statfs would give from an unmounted
// image's ext4 superblock. An image not yet made uses nothing.
func imageUsage(image string) (Usage, error) {
	f, err := os.Open(image)
	if errors.Is(err, fs.ErrNotExist) {
		return Usage{}, nil
	}
	if err != nil {
		return Usage{}, fmt.Errorf("open image: %w", err)
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil && !errors.Is(err, io.EOF) {
		return Usage{}, fmt.Errorf("read superblock of %s: %w", image, err)
	}
	return parseSuperblock(sb)
}

// ext4 superblock offsets (the kernel's struct ext4_super_block).
const (
	sbInodes       = 0x00
	sbBlocksLo     = 0x04
	sbFreeBlocksLo = 0x0c
	sbFreeInodes   = 0x10
	sbLogBlockSize = 0x18
	sbMagic        = 0x38
	sbIncompat     = 0x60
	sbBlocksHi     = 0x150
	sbFreeBlocksHi = 0x158
	sbOverhead     = 0x248
	ext4Magic      = 0xef53
	incompat64bit  = 0x80
)

func parseSuperblock(sb []byte) (Usage, error) {
	le := binary.LittleEndian
	if len(sb) < 1024 || le.Uint16(sb[sbMagic:]) != ext4Magic {
		return Usage{}, errors.New("image has no ext4 superblock")
	}
	blocks, free := uint64(le.Uint32(sb[sbBlocksLo:])), uint64(le.Uint32(sb[sbFreeBlocksLo:]))
	if le.Uint32(sb[sbIncompat:])&incompat64bit != 0 {
		blocks |= uint64(le.Uint32(sb[sbBlocksHi:])) << 32
		free |= uint64(le.Uint32(sb[sbFreeBlocksHi:])) << 32
	}
	logBS := le.Uint32(sb[sbLogBlockSize:])
	if logBS > 6 {
		return Usage{}, fmt.Errorf("image has block size 2^%d KiB", logBS)
	}
	bs := int64(1024) << logBS
	capacity := blocks - min(uint64(le.Uint32(sb[sbOverhead:])), blocks)
	inodes, freeInodes := int64(le.Uint32(sb[sbInodes:])), int64(le.Uint32(sb[sbFreeInodes:]))
	return Usage{
		BytesUsed: int64(capacity-min(free, capacity)) * bs, BytesAllowed: int64(capacity) * bs,
		InodesUsed: inodes - min(freeInodes, inodes), InodesAllowed: inodes,
	}, nil
}

// dirUsage adds up a quota-less workspace: allocated bytes and inodes.
func dirUsage(dir string) (Usage, error) {
	var u Usage
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == dir {
			return filepath.SkipAll
		}
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		u.InodesUsed++
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			u.BytesUsed += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		return Usage{}, fmt.Errorf("walk %s: %w", dir, err)
	}
	return u, nil
}
