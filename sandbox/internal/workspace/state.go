//go:build linux

package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// stateFile is the name of the persisted state in the workspace root.
const stateFile = "state.json"

// stateVersion is the format of stateFile; others are refused.
const stateVersion = 1

// maxStateBytes bounds the state file read at Open: about 100 bytes a
// tenant, so room for a few hundred thousand tenants.
const maxStateBytes = 64 << 20

// tenantState is what the Store keeps of one tenant.
type tenantState struct {
	ID     string `json:"id"`               // opaque directory name
	UID    uint32 `json:"uid"`              // host uid, never reused while the workspace exists
	GID    uint32 `json:"gid"`              // host gid
	Image  bool   `json:"image"`            // the workspace is a filesystem image (a quota)
	Bytes  int64  `json:"bytes,omitempty"`  // image size asked for at creation
	Inodes int64  `json:"inodes,omitempty"` // inode count asked for at creation
}

// state is the whole persisted state.
type state struct {
	Version int                     `json:"version"`
	Tenants map[string]*tenantState `json:"tenants"`
}

// loadState reads the state of root; a root without one has no tenants.
// The file must be a regular file owned by this process's user, readable
// by nobody else: it decides which uid owns which workspace.
func loadState(root string) (state, error) {
	st := state{Version: stateVersion, Tenants: map[string]*tenantState{}}
	name := filepath.Join(root, stateFile)
	f, err := os.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("workspace: open state: %w", err)
	}
	defer f.Close()
	var sys unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &sys); err != nil {
		return st, fmt.Errorf("workspace: stat state: %w", err)
	}
	switch {
	case sys.Mode&unix.S_IFMT != unix.S_IFREG:
		return st, fmt.Errorf("workspace: state %s is not a regular file", name)
	case sys.Uid != uint32(os.Geteuid()) || sys.Mode&0o077 != 0:
		return st, fmt.Errorf("workspace: state %s must be owned by uid %d with mode 0600 (has uid %d, mode %04o)", name, os.Geteuid(), sys.Uid, sys.Mode&0o7777)
	case sys.Size > maxStateBytes:
		return st, fmt.Errorf("workspace: state %s is larger than %d bytes", name, maxStateBytes)
	}
	if err := json.NewDecoder(f).Decode(&st); err != nil {
		return st, fmt.Errorf("workspace: decode state %s: %w", name, err)
	}
	if st.Version != stateVersion {
		return st, fmt.Errorf("workspace: state %s has version %d, want %d", name, st.Version, stateVersion)
	}
	if st.Tenants == nil {
		st.Tenants = map[string]*tenantState{}
	}
	return st, st.check()
}

// check refuses a state that would hand one uid or one directory to two
// tenants, or names that could lead outside the root.
func (st state) check() error {
	uids, ids := map[uint32]string{}, map[string]string{}
	for name, t := range st.Tenants {
		if err := ValidateTenant(name); err != nil {
			return fmt.Errorf("workspace: state: %w", err)
		}
		if t == nil || !validID(t.ID) {
			return fmt.Errorf("workspace: state: tenant %q has no valid id", name)
		}
		if other, ok := uids[t.UID]; ok {
			return fmt.Errorf("workspace: state: tenants %q and %q share uid %d", other, name, t.UID)
		}
		if other, ok := ids[t.ID]; ok {
			return fmt.Errorf("workspace: state: tenants %q and %q share id %s", other, name, t.ID)
		}
		uids[t.UID], ids[t.ID] = name, name
	}
	return nil
}

// save writes the state atomically: a temporary file, fsync, rename over
// the old one, fsync of the directory. A crash leaves the old state or
// the new one, never a mix.
func (st state) save(root string) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("workspace: encode state: %w", err)
	}
	tmp := filepath.Join(root, "."+stateFile+".tmp")
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("workspace: write state: %w", err)
	}
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(root, stateFile))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("workspace: write state: %w", err)
	}
	return syncDir(root)
}

// syncDir makes a rename or a creation in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("workspace: sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("workspace: sync %s: %w", dir, err)
	}
	return nil
}
