//go:build linux

package sandbox

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// testTenantUIDs is the shared test launcher's tenant range; no other
// test of termgate uses it.
var testTenantUIDs = UIDRange{First: 3970000, Count: 1000}

// needPython returns the Debian python3, which the sandbox sees in /usr.
// holdInotify opens inotify instances until the kernel refuses one (or
// 1000 are open), says how many, then holds them until killed.
const holdInotify = `
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
n = 0
while n < 1000 and libc.inotify_init() >= 0:
    n += 1
print("held", n, flush=True)
time.sleep(120)
`

const oneInotify = `
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
r = libc.inotify_init()
print("ok" if r >= 0 else "errno %d" % ctypes.get_errno())
`

// TestTenantsDoNotShareInotifyInstances: tenant A takes every inotify
// instance its host uid may have (max_user_instances); tenant B, with an
// id of its own, still gets one. The shared-uid case shows the starvation
// is real here, so the other case cannot pass by accident.
func TestTenantsDoNotShareInotifyInstances(t *testing.T) {
	sandboxtest.NeedRoot(t)
	py := needPython(t)
	l := needLauncher(t)
	a, b := testTenantUIDs.First+1, testTenantUIDs.First+2
	for _, c := range []struct {
		name     string
		uidA     uint32
		uidB     uint32
		starving bool
	}{{"one uid for both", a, a, true}, {"a uid each", a, b, false}} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			var out sandboxtest.SyncBuffer
			holder, err := l.Start(ctx, Policy{Command: []string{py, "-c", holdInotify}, Workspace: sandboxtest.Dir(t), UID: c.uidA, GID: c.uidA}, Stdio{Stdout: &out})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { cancel(); holder.Wait() }()
			waitFor(t, &out, "held ")
			r := runPolicy(t, Policy{Command: []string{py, "-c", oneInotify}, UID: c.uidB, GID: c.uidB})
			got := strings.TrimSpace(r.stdout)
			if c.starving && got == "ok" {
				t.Fatalf("A (%s) did not starve B on one uid: this host does not show the problem", strings.TrimSpace(out.String()))
			}
			if !c.starving && got != "ok" {
				t.Fatalf("B's inotify_init with A holding %q: %s (%v)", strings.TrimSpace(out.String()), got, r)
			}
		})
	}
}

func TestPolicyIdentityRefused(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	l := needLauncher(t)
	in := testTenantUIDs.First
	for _, c := range []struct {
		name     string
		uid, gid uint32
		want     error
	}{
		{"uid without gid", in, 0, ErrInvalidPolicy},
		{"gid without uid", 0, in, ErrInvalidPolicy},
		{"nobody", 65534, 65534, ErrInvalidPolicy},
		{"below the range", in - 1, in - 1, ErrIdentity},
		{"above the range", in + testTenantUIDs.Count, in, ErrIdentity},
		{"the shared identity", DefaultUID, DefaultGID, ErrIdentity},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := l.Start(t.Context(), Policy{Command: sh("true"), Workspace: sandboxtest.Dir(t), UID: c.uid, GID: c.gid}, Stdio{})
			if !errors.Is(err, c.want) {
				t.Errorf("start as %d:%d: %v, want %v", c.uid, c.gid, err, c.want)
			}
		})
	}
}

func TestTenantRangeRefused(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	for _, r := range []UIDRange{{First: 0, Count: 10}, {First: 65530, Count: 10}, {First: DefaultUID - 1, Count: 2}, {First: 1<<32 - 3, Count: 10}} {
		if l, err := NewLauncher(Config{TenantUIDs: r}); !errors.Is(err, ErrIdentity) {
			if l != nil {
				l.Close()
			}
			t.Errorf("tenant range %+v: %v, want ErrIdentity", r, err)
		}
	}
}

// openTestWorkspaces opens a Workspaces with a small quota: 8 MiB, 128 inodes.
func openTestWorkspaces(t *testing.T) *Workspaces {
	t.Helper()
	w, err := OpenWorkspaces(WorkspacesConfig{Root: filepath.Join(sandboxtest.Dir(t), "ws"), TenantUIDs: testTenantUIDs, Bytes: 8 << 20, Inodes: 128})
	if err != nil {
		t.Fatalf("open workspaces: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// tenantPolicy runs script in tenant's workspace as tenant's identity.
func tenantPolicy(t *testing.T, w *Workspaces, tenant, script string) Policy {
	t.Helper()
	ws, err := w.Prepare(tenant)
	if err != nil {
		t.Fatal(err)
	}
	return Policy{Command: sh(script), Workspace: ws.Path, UID: ws.UID, GID: ws.GID, Proc: ProcPrivate}
}

func TestWorkspaceQuotaInsideSandbox(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	w := openTestWorkspaces(t)
	r := runPolicy(t, tenantPolicy(t, w, "acme", "dd if=/dev/zero of=/workspace/big bs=1M count=16 2>&1; echo status $?"))
	if !strings.Contains(r.stdout, "No space left on device") || strings.Contains(r.stdout, "status 0") {
		t.Fatalf("16 MiB into an 8 MiB quota: %v", r)
	}
	u, err := w.Usage("acme")
	if err != nil || u.BytesUsed < u.BytesAllowed/2 || u.BytesAllowed > 8<<20 {
		t.Errorf("usage after filling: %+v, %v", u, err)
	}
	r = runPolicy(t, tenantPolicy(t, w, "acme", `rm -f /workspace/big; i=0; while [ $i -lt 1000 ] && touch /workspace/f$i 2>/dev/null; do i=$((i+1)); done; echo $i`))
	if n := strings.TrimSpace(r.stdout); n == "" || n == "1000" || len(n) > 3 {
		t.Fatalf("files made under a 128-inode quota: %v", r)
	}
	if u, err = w.Usage("acme"); err != nil || u.InodesUsed != u.InodesAllowed {
		t.Errorf("usage after the inodes ran out: %+v, %v", u, err)
	}
}

// TestMountinfoHidesTenantAndHostPath: with a private /proc, the
// workspace's mount shows neither the tenant's name nor a host path: it
// is the root ("/") of a filesystem of its own.
func TestMountinfoHidesTenantAndHostPath(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	w := openTestWorkspaces(t)
	const tenant = "acme-secret-tenant"
	r := runPolicy(t, tenantPolicy(t, w, tenant, "cat /proc/self/mountinfo"))
	if !r.exit.Success() || strings.Contains(r.stdout, tenant) || strings.Contains(r.stdout, w.s.Root()) {
		t.Fatalf("mountinfo names the tenant or the host root %s: %v", w.s.Root(), r)
	}
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == DefaultWorkspaceMount && f[3] != "/" {
			t.Errorf("workspace mount has root %q, want /: %s", f[3], line)
		}
	}
}

// TestUnenforceableQuotaIsThisPackagesError: callers test quotas against
// sandbox.ErrUnenforceable, like every other ceiling.
func TestUnenforceableQuotaIsThisPackagesError(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	w, err := OpenWorkspaces(WorkspacesConfig{Root: filepath.Join(t.TempDir(), "ws"), TenantUIDs: testTenantUIDs, Bytes: 8 << 20, Mkfs: "/nonexistent/mkfs.ext4"})
	if err == nil {
		w.Close()
	}
	if !errors.Is(err, ErrUnenforceable) {
		t.Fatalf("quota without mkfs.ext4: %v, want ErrUnenforceable", err)
	}
}
