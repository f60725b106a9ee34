//go:build linux

package workspace

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Sentinel errors.
var (
	// ErrUnenforceable is wrapped when a quota was asked for and this host
	// cannot apply it.
	ErrUnenforceable = errors.New("workspace: quota cannot be enforced on this host")
	// ErrExhausted is wrapped when every uid of the range is taken.
	ErrExhausted = errors.New("workspace: tenant uid range exhausted")
	// ErrInvalidTenant is wrapped for a tenant name that cannot name a workspace.
	ErrInvalidTenant = errors.New("workspace: invalid tenant name")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("workspace: store closed")
	// ErrInUse is wrapped when another Store holds the root.
	ErrInUse = errors.New("workspace: root in use by another process")
)

// Minimum quotas: below them mkfs.ext4 cannot make a filesystem that holds
// anything.
const (
	MinBytes  = 4 << 20
	MinInodes = 64
)

// IDRange is a range of host uids (and the same gids): First, First+1, ...,
// First+Count-1.
type IDRange struct {
	First, Count uint32
}

// Contains reports whether id lies in the range.
func (r IDRange) Contains(id uint32) bool {
	return id >= r.First && id-r.First < r.Count
}

// check refuses ranges that hold root, nobody or wrap around.
func (r IDRange) check() error {
	switch {
	case r.Count == 0:
		return errors.New("workspace: the uid range is empty")
	case r.First == 0:
		return errors.New("workspace: the uid range may not hold uid 0 (root)")
	case uint64(r.First)+uint64(r.Count) > 1<<32-1:
		return fmt.Errorf("workspace: the uid range %d+%d passes the largest uid", r.First, r.Count)
	case r.Contains(65534):
		return errors.New("workspace: the uid range may not hold 65534 (nobody)")
	}
	return nil
}

// Config configures a Store.
type Config struct {
	// Root is the workspace root, an absolute path (created 0711).
	Root string
	// IDs is the range tenant uids and gids come from (required).
	IDs IDRange
	// Bytes is each new workspace's size quota; 0 turns quotas off and
	// workspaces are plain directories. At least MinBytes otherwise.
	Bytes int64
	// Inodes is each new workspace's inode quota (with Bytes; 0 lets
	// mkfs.ext4 choose). At least MinInodes otherwise.
	Inodes int64
	// Mkfs is the mkfs.ext4 program, looked up in PATH ("mkfs.ext4").
	Mkfs string
	// Logger receives what recovery removed and quota events; nil discards.
	Logger *slog.Logger
	// Adopt makes Open take over the tenants' mounts and loop devices a
	// previous instance on this root left, when each is what the layout
	// says (see Adopted), instead of removing them: executions that
	// outlived that instance use them. Only what is not a tenant's
	// workspace is removed. Without it Open removes every one.
	Adopt bool
}

// Workspace is a tenant's workspace: the host directory to bind and the
// host identity its sandboxes run as.
type Workspace struct {
	Tenant   string
	Path     string
	UID, GID uint32
}

// Store hands out tenant workspaces under one root. It is safe for
// concurrent use; one mutex orders every change.
type Store struct {
	cfg  Config
	root string // Root with symlinks resolved, as the kernel names it
	mkfs string // resolved mkfs.ext4 when quotas are on
	log  *slog.Logger
	lock *os.File

	mu        sync.Mutex
	st        state
	closed    bool
	recovered []string
	adopted   []string
}

var tenantName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`) })

// ValidateTenant reports whether name can own a workspace: 1 to 128
// letters, digits, '.', '_' or '-', starting with a letter or digit.
func ValidateTenant(name string) error {
	if !tenantName().MatchString(name) {
		return fmt.Errorf("%w: %q must match %s", ErrInvalidTenant, name, tenantName())
	}
	return nil
}

// Open takes the workspace root, loads its state and removes what a
// crashed instance left (see Recovered). With a quota it first proves
// that a quota can be applied here, or fails wrapping ErrUnenforceable.
func Open(cfg Config) (*Store, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if s.root, err = makeRoot(cfg.Root); err != nil {
		return nil, err
	}
	if s.lock, err = lockRoot(s.root); err != nil {
		return nil, err
	}
	if err := s.open(); err != nil {
		s.lock.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) open() error {
	var err error
	if s.st, err = loadState(s.root); err != nil {
		return err
	}
	if s.recovered, err = s.recover(); err != nil {
		return err
	}
	if s.cfg.Bytes == 0 {
		return os.MkdirAll(filepath.Join(s.root, dirsDir), 0o711)
	}
	if s.mkfs, err = findMkfs(s.cfg.Mkfs); err != nil {
		return err
	}
	return s.probe()
}

func (c Config) check() error {
	switch {
	case c.Root == "" || !filepath.IsAbs(c.Root):
		return fmt.Errorf("workspace: root %q must be an absolute path", c.Root)
	case c.Bytes < 0 || (c.Bytes != 0 && c.Bytes < MinBytes):
		return fmt.Errorf("workspace: quota %d bytes is below the minimum %d", c.Bytes, MinBytes)
	case c.Inodes < 0 || (c.Inodes != 0 && c.Inodes < MinInodes):
		return fmt.Errorf("workspace: inode quota %d is below the minimum %d", c.Inodes, MinInodes)
	case c.Inodes != 0 && c.Bytes == 0:
		return errors.New("workspace: an inode quota needs a byte quota")
	}
	return c.IDs.check()
}

// makeRoot creates the root 0711, owned by this process's user, and
// returns it with symlinks resolved.
func makeRoot(root string) (string, error) {
	if err := os.MkdirAll(root, 0o711); err != nil {
		return "", fmt.Errorf("workspace: create root: %w", err)
	}
	resolved, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("workspace: resolve root: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(resolved, &st); err != nil {
		return "", fmt.Errorf("workspace: stat root: %w", err)
	}
	if st.Uid != uint32(os.Geteuid()) {
		return "", fmt.Errorf("workspace: root %s belongs to uid %d, not to termgate's uid %d", root, st.Uid, os.Geteuid())
	}
	if err := os.Chmod(resolved, 0o711); err != nil {
		return "", fmt.Errorf("workspace: chmod root: %w", err)
	}
	return resolved, nil
}

// lockRoot holds an exclusive flock on ROOT/.lock for the Store's life:
// two Stores on one root would give one uid to two tenants.
func lockRoot(root string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(root, ".lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("workspace: open lock: %w", err)
	}
	// A lock just released can still be held for a moment by a child this
	// process forks (the descriptor lives on in it until its exec closes
	// it), so a refusal is retried for a bounded time.
	deadline := time.Now().Add(lockWait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("%w: %s: %w", ErrInUse, root, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lockWait bounds how long Open waits for the root's lock.
const lockWait = 2 * time.Second

// Recovered lists what Open removed that a previous instance had left:
// one line per mount or loop device, each also logged.
func (s *Store) Recovered() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.recovered...)
}

// Adopted lists the mounts and loop devices Open took over (Config.Adopt)
// from a previous instance: one line each, each also logged.
func (s *Store) Adopted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.adopted...)
}

// Root returns the workspace root with symlinks resolved.
func (s *Store) Root() string { return s.root }

// Prepare returns tenant's workspace, making it (and its uid) on first
// use and mounting its image when it is not mounted. Calls for one tenant
// return the same workspace.
func (s *Store) Prepare(tenant string) (Workspace, error) {
	if err := ValidateTenant(tenant); err != nil {
		return Workspace{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Workspace{}, ErrClosed
	}
	t, err := s.tenant(tenant)
	if err != nil {
		return Workspace{}, err
	}
	ws := Workspace{Tenant: tenant, Path: t.path(s.root), UID: t.UID, GID: t.GID}
	if t.Image {
		err = s.mountImage(t)
	} else {
		err = s.makeDir(t)
	}
	if err != nil {
		return Workspace{}, err
	}
	return ws, nil
}

// tenant returns the tenant's state, allocating an id and a uid and
// persisting them before anything is made on disk: a crash afterwards
// leaves a reserved uid, never one given twice.
func (s *Store) tenant(name string) (*tenantState, error) {
	if t, ok := s.st.Tenants[name]; ok {
		if s.cfg.Bytes > 0 && !t.Image {
			return nil, fmt.Errorf("%w: tenant %q has a workspace made without a quota; move its files into a new workspace to apply one", ErrUnenforceable, name)
		}
		return t, nil
	}
	uid, err := s.freeID()
	if err != nil {
		return nil, err
	}
	t := &tenantState{ID: newID(), UID: uid, GID: uid, Image: s.cfg.Bytes > 0, Bytes: s.cfg.Bytes, Inodes: s.cfg.Inodes}
	s.st.Tenants[name] = t
	if err := s.st.save(s.root); err != nil {
		delete(s.st.Tenants, name)
		return nil, err
	}
	s.log.Info("workspace tenant added", "tenant", name, "uid", uid, "quota_bytes", t.Bytes, "quota_inodes", t.Inodes)
	return t, nil
}

// freeID returns the lowest id of the range no tenant holds. Tenants are
// never forgotten, so an id is never reused while its workspace exists.
func (s *Store) freeID() (uint32, error) {
	taken := make(map[uint32]bool, len(s.st.Tenants))
	for _, t := range s.st.Tenants {
		taken[t.UID] = true
	}
	r := s.cfg.IDs
	for i := range r.Count {
		if id := r.First + i; !taken[id] {
			return id, nil
		}
	}
	return 0, fmt.Errorf("%w: all %d ids from %d are taken", ErrExhausted, r.Count, r.First)
}

// newID returns an opaque directory name: 16 random hex digits.
func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var idPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{16}$`) })

func validID(id string) bool { return idPattern().MatchString(id) }

// Directories of the root.
const (
	dirsDir   = "w"
	mountsDir = "mnt"
	imagesDir = "images"
)

// path is the tenant's workspace directory under root.
func (t *tenantState) path(root string) string {
	if t.Image {
		return filepath.Join(root, mountsDir, t.ID)
	}
	return filepath.Join(root, dirsDir, t.ID)
}

// imagePath is the tenant's filesystem image under root.
func (t *tenantState) imagePath(root string) string {
	return filepath.Join(root, imagesDir, t.ID+".img")
}

// makeDir makes a quota-less workspace, owned by the tenant, 0700.
func (s *Store) makeDir(t *tenantState) error {
	dir := t.path(s.root)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("workspace: create %s: %w", dir, err)
	}
	return own(dir, t)
}

// own hands dir to the tenant (as root; otherwise the files stay termgate's).
func own(dir string, t *tenantState) error {
	if os.Geteuid() != 0 {
		return nil
	}
	if err := unix.Lchown(dir, int(t.UID), int(t.GID)); err != nil {
		return fmt.Errorf("workspace: hand %s to uid %d: %w", dir, t.UID, err)
	}
	if err := unix.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("workspace: chmod %s: %w", dir, err)
	}
	return nil
}

// Close unmounts the images this Store mounted and releases the root. A
// workspace still in use by a sandbox stays usable by it: the sandbox's
// own mount of it holds the filesystem and its loop device, which goes
// when the last user does; until then the next Store mounts that device
// again (see Adopt).
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.unmountAll()
	s.lock.Close()
	return err
}
