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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { sandboxtest.Main(m) }

// testIDs is a range no other test of termgate uses.
var testIDs = IDRange{First: 3950000, Count: 1000}

// openStore opens a Store on a fresh root and closes it when the test ends.
func openStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	if cfg.Root == "" {
		cfg.Root = filepath.Join(t.TempDir(), "ws")
	}
	if cfg.IDs == (IDRange{}) {
		cfg.IDs = testIDs
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func prepare(t *testing.T, s *Store, tenant string) Workspace {
	t.Helper()
	ws, err := s.Prepare(tenant)
	if err != nil {
		t.Fatalf("prepare %s: %v", tenant, err)
	}
	return ws
}

func TestTenantsGetOwnPersistedUIDs(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	root := filepath.Join(t.TempDir(), "ws")
	s := openStore(t, Config{Root: root})
	a, b := prepare(t, s, "acme"), prepare(t, s, "globex")
	if a.UID == b.UID || a.Path == b.Path {
		t.Fatalf("two tenants share an identity or a path: %+v %+v", a, b)
	}
	if again := prepare(t, s, "acme"); again != a {
		t.Fatalf("acme again: %+v, first %+v", again, a)
	}
	for _, ws := range []Workspace{a, b} {
		if !testIDs.Contains(ws.UID) || ws.GID != ws.UID {
			t.Errorf("%s: uid %d gid %d outside %+v", ws.Tenant, ws.UID, ws.GID, testIDs)
		}
		if strings.Contains(ws.Path, ws.Tenant) {
			t.Errorf("path %s names the tenant", ws.Path)
		}
		checkOwner(t, ws.Path, ws.UID, 0o700)
	}
	checkOwner(t, root, 0, 0o711)
	checkOwner(t, filepath.Join(root, stateFile), 0, 0o600)
	s.Close()

	s2 := openStore(t, Config{Root: root})
	if a2 := prepare(t, s2, "acme"); a2 != a {
		t.Errorf("acme after reopen: %+v, before %+v", a2, a)
	}
	c := prepare(t, s2, "initech")
	if c.UID == a.UID || c.UID == b.UID {
		t.Errorf("a new tenant reused uid %d", c.UID)
	}
}

func checkOwner(t *testing.T, p string, uid uint32, mode uint32) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != uid || st.Mode&0o7777 != mode {
		t.Errorf("%s: uid %d mode %04o, want uid %d mode %04o", p, st.Uid, st.Mode&0o7777, uid, mode)
	}
}

func TestConcurrentPrepareOneWorkspace(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	s := openStore(t, Config{})
	var wg sync.WaitGroup
	got := make([]Workspace, 16)
	for i := range got {
		wg.Go(func() { got[i], _ = s.Prepare([]string{"a", "b"}[i%2]) })
	}
	wg.Wait()
	for i, ws := range got {
		if ws != got[i%2] || ws.UID == 0 {
			t.Errorf("call %d: %+v, want %+v", i, ws, got[i%2])
		}
	}
}

func TestRangeExhausted(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	s := openStore(t, Config{IDs: IDRange{First: 3960000, Count: 2}})
	prepare(t, s, "a")
	prepare(t, s, "b")
	if _, err := s.Prepare("c"); !errors.Is(err, ErrExhausted) {
		t.Fatalf("third tenant of two ids: %v, want ErrExhausted", err)
	}
	prepare(t, s, "a") // known tenants still work
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", ".", "..", "a/b", "-a", "a\x00", strings.Repeat("a", 129), "a b"} {
		if err := ValidateTenant(name); !errors.Is(err, ErrInvalidTenant) {
			t.Errorf("tenant %q: %v, want ErrInvalidTenant", name, err)
		}
	}
	root := t.TempDir()
	for _, cfg := range []Config{
		{Root: "rel", IDs: testIDs},
		{Root: root},
		{Root: root, IDs: IDRange{First: 0, Count: 10}},
		{Root: root, IDs: IDRange{First: 65530, Count: 10}},
		{Root: root, IDs: IDRange{First: 1<<32 - 5, Count: 10}},
		{Root: root, IDs: testIDs, Bytes: 1 << 20},
		{Root: root, IDs: testIDs, Bytes: 8 << 20, Inodes: 10},
		{Root: root, IDs: testIDs, Inodes: 1000},
	} {
		if s, err := Open(cfg); err == nil {
			s.Close()
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

func TestSecondStoreOnOneRootRefused(t *testing.T) {
	t.Parallel()
	s := openStore(t, Config{})
	if s2, err := Open(Config{Root: s.Root(), IDs: testIDs}); !errors.Is(err, ErrInUse) {
		if s2 != nil {
			s2.Close()
		}
		t.Fatalf("second store: %v, want ErrInUse", err)
	}
}

// quotaConfig is a small image: 8 MiB and 128 inodes.
func quotaConfig() Config { return Config{Bytes: 8 << 20, Inodes: 128} }

func TestQuotaBytesAndInodes(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	s := openStore(t, quotaConfig())
	ws := prepare(t, s, "acme")
	if _, err := os.Stat(filepath.Join(ws.Path, "lost+found")); err == nil {
		t.Error("lost+found left in the workspace")
	}
	checkOwner(t, ws.Path, ws.UID, 0o700)
	err := writeFile(filepath.Join(ws.Path, "big"), 16<<20)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("16 MiB into an 8 MiB quota: %v, want ENOSPC", err)
	}
	u, err := s.Usage("acme")
	if err != nil {
		t.Fatal(err)
	}
	if u.BytesAllowed > 8<<20 || u.BytesUsed < u.BytesAllowed/2 || !u.Mounted {
		t.Errorf("usage after filling: %+v", u)
	}
	os.Remove(filepath.Join(ws.Path, "big"))

	n, err := fillInodes(ws.Path, 1000)
	if !errors.Is(err, syscall.ENOSPC) || n > 128 {
		t.Fatalf("%d files made of 128 inodes, then %v; want ENOSPC", n, err)
	}
	if u, _ = s.Usage("acme"); u.InodesUsed != u.InodesAllowed || u.InodesAllowed > 128 {
		t.Errorf("usage after the inodes ran out: %+v", u)
	}
}

func writeFile(name string, size int) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for written := 0; written < size; written += len(buf) {
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
	return f.Sync()
}

func fillInodes(dir string, most int) (int, error) {
	for i := range most {
		f, err := os.Create(filepath.Join(dir, "f"+strconv.Itoa(i)))
		if err != nil {
			return i, err
		}
		f.Close()
	}
	return most, nil
}

// TestReopenAfterCrashRemovesStaleMounts: a Store that dies without Close
// (kill -9) leaves its mounts and loop devices; the next Open removes and
// names them, and the tenant's files survive in its image.
func TestReopenAfterCrashRemovesStaleMounts(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	cfg := quotaConfig()
	cfg.Root, cfg.IDs = filepath.Join(t.TempDir(), "ws"), testIDs
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ws := prepare(t, s, "acme")
	if err := os.WriteFile(filepath.Join(ws.Path, "kept"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.lock.Close() // the crash: the lock goes with the process, the mount stays
	t.Cleanup(func() { unmount(ws.Path) })
	if !mounted(ws.Path) {
		t.Fatal("workspace not mounted before the crash")
	}

	s2 := openStore(t, cfg)
	got := strings.Join(s2.Recovered(), "\n")
	if !strings.Contains(got, "mount "+ws.Path) || !strings.Contains(got, "loop /dev/loop") {
		t.Errorf("recovered %q, want the mount at %s and its loop device", got, ws.Path)
	}
	if mounted(ws.Path) {
		t.Error("stale mount still there")
	}
	if ws2 := prepare(t, s2, "acme"); ws2 != ws {
		t.Errorf("after recovery %+v, before %+v", ws2, ws)
	}
	if data, err := os.ReadFile(filepath.Join(ws.Path, "kept")); string(data) != "data" {
		t.Errorf("file after recovery: %q, %v", data, err)
	}
	s2.Close()
	if loops := loopsOf(t, cfg.Root); len(loops) != 0 {
		t.Errorf("loop devices left after Close: %v", loops)
	}
}

func loopsOf(t *testing.T, root string) []string {
	t.Helper()
	resolved, _ := filepath.EvalSymlinks(root)
	loops, err := boundLoops()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for dev, backing := range loops {
		if strings.HasPrefix(backing, resolved+"/") {
			out = append(out, dev)
		}
	}
	return out
}

func TestQuotaThatCannotBeEnforcedFailsOpen(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	fake := filepath.Join(t.TempDir(), "mkfs.ext4")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, mkfs := range map[string]string{
		"mkfs.ext4 missing":            "/nonexistent/mkfs.ext4",
		"an image that does not mount": fake,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := quotaConfig()
			cfg.Root, cfg.IDs, cfg.Mkfs = filepath.Join(t.TempDir(), "ws"), testIDs, mkfs
			s, err := Open(cfg)
			if err == nil {
				s.Close()
			}
			if !errors.Is(err, ErrUnenforceable) {
				t.Fatalf("open: %v, want ErrUnenforceable", err)
			}
			if loops := loopsOf(t, cfg.Root); len(loops) != 0 {
				t.Errorf("loop devices left: %v", loops)
			}
		})
	}
}

// TestQuotaMkfsRefusesFailsOpen: a quota whose size cannot hold its
// inodes (64 MiB with 1M) fails Open, not every tenant's first Prepare.
func TestQuotaMkfsRefusesFailsOpen(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	cfg := quotaConfig()
	cfg.Root, cfg.IDs, cfg.Bytes, cfg.Inodes = filepath.Join(t.TempDir(), "ws"), testIDs, 64<<20, 1<<20
	s, err := Open(cfg)
	if err == nil {
		defer s.Close()
		_, err = s.Prepare("acme")
		t.Fatalf("Open accepted a quota mkfs refuses; the first Prepare: %v", err)
	}
	if !errors.Is(err, ErrUnenforceable) || !strings.Contains(err.Error(), "inode") {
		t.Fatalf("open: %v, want ErrUnenforceable naming the inodes", err)
	}
}

func TestQuotaOnAWorkspaceMadeWithoutOne(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	s := openStore(t, Config{})
	prepare(t, s, "acme")
	root := s.Root()
	s.Close()
	cfg := quotaConfig()
	cfg.Root = root
	s2 := openStore(t, cfg)
	if _, err := s2.Prepare("acme"); !errors.Is(err, ErrUnenforceable) {
		t.Fatalf("quota on an old directory workspace: %v, want ErrUnenforceable", err)
	}
	prepare(t, s2, "globex")
}

func TestListReadsMountedAndUnmountedImages(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	s := openStore(t, quotaConfig())
	ws := prepare(t, s, "acme")
	if err := writeFile(filepath.Join(ws.Path, "f"), 2<<20); err != nil {
		t.Fatal(err)
	}
	mountedList, err := List(s.Root())
	if err != nil || len(mountedList) != 1 {
		t.Fatalf("list: %v %v", mountedList, err)
	}
	s.Close()
	// A sandbox starting anywhere on the host copies every mount into its
	// namespace for a moment, which delays the superblock's last write
	// after the unmount: read it again until it has settled.
	var unmountedList []Entry
	sandboxtest.Eventually(t, 5*time.Second, func() bool {
		if unmountedList, err = List(s.Root()); err != nil || len(unmountedList) != 1 {
			t.Fatalf("list: %v %v", unmountedList, err)
		}
		return unmountedList[0].Usage.BytesUsed == mountedList[0].Usage.BytesUsed
	})
	m, u := mountedList[0].Usage, unmountedList[0].Usage
	if !m.Mounted || u.Mounted || m.BytesUsed < 2<<20 || u.BytesUsed != m.BytesUsed || u.BytesAllowed != m.BytesAllowed || u.InodesUsed != m.InodesUsed {
		t.Errorf("mounted %+v, unmounted %+v", m, u)
	}
}

func TestParseMountinfo(t *testing.T) {
	t.Parallel()
	line := `36 35 98:0 / /mnt/a\040b rw,noatime master:1 - ext4 /dev/loop1 rw,errors=continue`
	m, ok := parseMountinfo(line)
	if !ok || m.dev != "98:0" || m.root != "/" || m.target != "/mnt/a b" || m.opts != "rw,noatime" || m.fstype != "ext4" || m.source != "/dev/loop1" {
		t.Errorf("parsed %+v %v", m, ok)
	}
	for _, bad := range []string{"", "1 2 3", `36 35 98:0 / /x rw - ext4`} {
		if _, ok := parseMountinfo(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzParseMountinfo(f *testing.F) {
	f.Add(`36 35 98:0 / /mnt/a\040b rw,noatime master:1 - ext4 /dev/loop1 rw`)
	f.Fuzz(func(t *testing.T, line string) {
		parseMountinfo(line)
		unescapeMount(line)
	})
}

func FuzzParseSuperblock(f *testing.F) {
	f.Add(make([]byte, 1024))
	f.Fuzz(func(t *testing.T, sb []byte) {
		if u, err := parseSuperblock(sb); err == nil && (u.BytesUsed < 0 || u.BytesUsed > u.BytesAllowed || u.InodesUsed > u.InodesAllowed) {
			t.Errorf("usage %+v", u)
		}
	})
}

// TestLoopOfADeletedImageIsNotReused: a loop device still bound to an
// image deleted since is not the image made again at the same path.
func TestLoopOfADeletedImageIsNotReused(t *testing.T) {
	sandboxtest.NeedRoot(t)
	dir := t.TempDir()
	image := filepath.Join(dir, "x.img")
	if err := os.WriteFile(image, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := attachLoop(image)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { detachLoop(f.Name()); f.Close() }()
	os.Remove(image)
	if err := os.WriteFile(image, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	dev, g, err := loopFor(image)
	if err != nil {
		t.Fatal(err)
	}
	if g != nil {
		defer func() { detachLoop(g.Name()); g.Close() }()
	}
	if dev == f.Name() {
		t.Errorf("the loop device %s of the deleted image was reused for the new one", dev)
	}
}

// holdMounts starts a sandbox (bwrap) with dir bound at /w, as an
// execution has its workspace: it keeps that mount alive whatever happens
// to the host's. Like any sandbox it drops the rest of the host's mounts,
// so it pins no other test's. It ends with the test; the returned path is
// dir as the sandbox sees it.
func holdMounts(t *testing.T, dir string) string {
	t.Helper()
	bwrap, err := exec.LookPath("bwrap")
	sandboxtest.Need(t, "bwrap (bubblewrap)", err)
	cmd := exec.Command(bwrap, "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
		"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--bind", dir, "/w",
		"--die-with-parent", "sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the holder: %v", err)
	}
	// bwrap's child is the sandbox; killing bwrap does not end it.
	children := func() []string {
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
		return strings.Fields(string(kids))
	}
	t.Cleanup(func() {
		for _, pid := range children() {
			if n, err := strconv.Atoi(pid); err == nil {
				unix.Kill(n, unix.SIGKILL)
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
	})
	var want, got unix.Stat_t
	if err := unix.Stat(dir, &want); err != nil {
		t.Fatal(err)
	}
	var held string
	sandboxtest.Eventually(t, 10*time.Second, func() bool {
		for _, pid := range children() { // the sandbox sees dir at /w once set up
			p := filepath.Join("/proc", pid, "root", "w")
			if unix.Stat(p, &got) == nil && got.Dev == want.Dev && got.Ino == want.Ino {
				held = p
			}
		}
		return held != ""
	})
	return held
}

// mountsAt lists the mounts of this namespace at target.
func mountsAt(t *testing.T, target string) []mountEntry {
	t.Helper()
	all, err := readMountinfo("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []mountEntry
	for _, m := range all {
		if m.target == target {
			out = append(out, m)
		}
	}
	return out
}

// mountID returns the unique id (never reused) of the mount at dir.
func mountID(t *testing.T, dir string) uint64 {
	t.Helper()
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID_UNIQUE, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mask&unix.STATX_MNT_ID_UNIQUE == 0 {
		sandboxtest.Unavailable(t, "statx gives no unique mount id (kernel 6.8 or later)")
	}
	return st.Mnt_id
}

// loopsBacking lists the loop devices bound to image.
func loopsBacking(t *testing.T, image string) []string {
	t.Helper()
	loops, err := boundLoops()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for dev, backing := range loops {
		if backing == image {
			out = append(out, dev)
		}
	}
	return out
}

// TestAdoptKeepsMountsInUse: after a restart the executions an earlier
// server started still write to their workspaces (held here by a process
// in its own mount namespace, as a sandbox holds its bind mount). A Store
// opened with Adopt takes the mount and the loop device over: the image
// stays on one loop device and one filesystem, so what the old mount
// writes is what the new one reads.
func TestAdoptKeepsMountsInUse(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	cfg := quotaConfig()
	cfg.Root, cfg.IDs, cfg.Adopt = filepath.Join(t.TempDir(), "ws"), testIDs, true
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ws := prepare(t, s, "acme")
	old := holdMounts(t, ws.Path)
	s.lock.Close() // the crash: the lock goes, the mounts stay
	t.Cleanup(func() { unmount(ws.Path) })
	image := filepath.Join(s.Root(), imagesDir, s.st.Tenants["acme"].ID+".img")
	before := mountID(t, ws.Path)

	s2 := openStore(t, cfg)
	if got := s2.Recovered(); len(got) != 0 {
		t.Errorf("recovery removed %q, in use by running executions", got)
	}
	if got := strings.Join(s2.Adopted(), "\n"); !strings.Contains(got, "mount "+ws.Path) || !strings.Contains(got, "loop /dev/loop") {
		t.Errorf("adopted %q, want the mount at %s and its loop device", got, ws.Path)
	}
	if ws2 := prepare(t, s2, "acme"); ws2 != ws {
		t.Fatalf("after the restart %+v, before %+v", ws2, ws)
	}
	if n := len(mountsAt(t, ws.Path)); n != 1 {
		t.Errorf("%d mounts at %s, want 1", n, ws.Path)
	}
	if after := mountID(t, ws.Path); after != before {
		t.Errorf("mount %d at %s after the restart, %d before: want the one mount kept", after, ws.Path, before)
	}
	if loops := loopsBacking(t, image); len(loops) != 1 {
		t.Errorf("image %s on loop devices %v, want exactly one", image, loops)
	}
	if err := os.WriteFile(filepath.Join(old, "written-by-old"), []byte("one filesystem"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(ws.Path, "written-by-old")); string(data) != "one filesystem" {
		t.Errorf("a file the old mount wrote, read through the new one: %q, %v", data, err)
	}
}

// TestAdoptAfterCloseReusesTheLoopInUse: a restart closes the Store, which
// unmounts the host's mounts; the executions' sandboxes keep theirs, and
// with them the loop device. The next Store adopts that device, Prepare
// mounts it rather than a second one, and the tenant's quota holds.
func TestAdoptAfterCloseReusesTheLoopInUse(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	cfg := quotaConfig()
	cfg.Root, cfg.IDs, cfg.Adopt = filepath.Join(t.TempDir(), "ws"), testIDs, true
	s := openStore(t, cfg)
	ws := prepare(t, s, "acme")
	image := filepath.Join(s.Root(), imagesDir, s.st.Tenants["acme"].ID+".img")
	old := holdMounts(t, ws.Path)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	loops := loopsBacking(t, image)
	if len(loops) != 1 {
		t.Fatalf("image on loop devices %v after Close with a holder, want one", loops)
	}

	s2 := openStore(t, cfg)
	if got := s2.Recovered(); len(got) != 0 {
		t.Errorf("recovery removed %q, in use by running executions", got)
	}
	if got := s2.Adopted(); len(got) != 1 || !strings.Contains(got[0], "loop "+loops[0]) {
		t.Errorf("adopted %q, want %s", got, loops[0])
	}
	prepare(t, s2, "acme")
	if now := loopsBacking(t, image); len(now) != 1 || now[0] != loops[0] {
		t.Errorf("image on loop devices %v after Prepare, want %s alone", now, loops[0])
	}
	if err := os.WriteFile(filepath.Join(old, "written-by-old"), []byte("one filesystem"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(ws.Path, "written-by-old")); string(data) != "one filesystem" {
		t.Errorf("a file the old mount wrote, read through the new one: %q, %v", data, err)
	}
	if err := writeFile(filepath.Join(ws.Path, "big"), 16<<20); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("16 MiB into the 8 MiB quota after the restart: %v, want ENOSPC", err)
	}
}

// TestAdoptRemovesWhatIsStale: with Adopt, a mount that is not a tenant's
// workspace as the layout says is removed as without it, and named. Its
// loop device goes with it, or, when a sandbox starting elsewhere on the
// host holds a copy of the mount for a moment, right after: either way
// none is left once the Store is closed, nor one bound to an image
// mounted nowhere.
func TestAdoptRemovesWhatIsStale(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	tmpfs := func(t *testing.T, dir string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, "size=1m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	}
	for _, c := range []struct {
		name    string
		crash   func(t *testing.T, ws Workspace, image string)
		removed int // mounts in Recovered
		kept    int // mounts in Adopted
	}{
		{"the image is gone", func(t *testing.T, ws Workspace, image string) {
			os.Remove(image)
		}, 1, 0},
		{"mounted without nodev", func(t *testing.T, ws Workspace, image string) {
			if err := unix.Mount("", ws.Path, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOSUID, ""); err != nil {
				t.Fatal(err)
			}
		}, 1, 0},
		{"another filesystem at the workspace", func(t *testing.T, ws Workspace, image string) {
			unmount(ws.Path)
			tmpfs(t, ws.Path)
		}, 1, 0},
		{"a filesystem on top of the workspace", func(t *testing.T, ws Workspace, image string) {
			tmpfs(t, ws.Path)
		}, 2, 0},
		{"no tenant's workspace", func(t *testing.T, ws Workspace, image string) {
			tmpfs(t, filepath.Join(filepath.Dir(ws.Path), "0123456789abcdef"))
		}, 1, 1},
		{"an image mounted nowhere", func(t *testing.T, ws Workspace, image string) {
			unmount(ws.Path)
			f, err := attachLoop(image) // as losetup would: without autoclear
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
			if err != nil {
				t.Fatal(err)
			}
			info.Flags &^= unix.LO_FLAGS_AUTOCLEAR
			if err := unix.IoctlLoopSetStatus64(int(f.Fd()), info); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { detachLoop(f.Name()) })
		}, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := quotaConfig()
			cfg.Root, cfg.IDs, cfg.Adopt = filepath.Join(t.TempDir(), "ws"), testIDs, true
			s, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ws := prepare(t, s, "acme")
			image := filepath.Join(s.Root(), imagesDir, s.st.Tenants["acme"].ID+".img")
			s.lock.Close() // the crash
			t.Cleanup(func() { unmount(ws.Path) })
			c.crash(t, ws, image)

			s2 := openStore(t, cfg)
			if got := countPrefix(s2.Recovered(), "mount "); got != c.removed {
				t.Errorf("recovered %q, want %d mounts", s2.Recovered(), c.removed)
			}
			if got := countPrefix(s2.Adopted(), "mount "); got != c.kept {
				t.Errorf("adopted %q, want %d mounts", s2.Adopted(), c.kept)
			}
			if _, err := os.Stat(image); err == nil {
				prepare(t, s2, "acme")
				if m := mountsAt(t, ws.Path); len(m) != 1 || !hasOpts(m[0].opts, "nodev", "nosuid") {
					t.Errorf("mounts at the workspace after Prepare: %+v", m)
				}
			}
			s2.Close()
			if !sandboxtest.Eventually(t, 10*time.Second, func() bool { return len(loopsOf(t, cfg.Root)) == 0 }) {
				t.Errorf("loop devices left after Close: %v", loopsOf(t, cfg.Root))
			}
		})
	}
}

func countPrefix(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}
