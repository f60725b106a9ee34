//go:build linux

package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// cgroupTestLauncher returns a launcher of the test's own, whose cgroups
// live under a parent nobody else uses; it is closed and its parent is
// removed when the test ends.
func cgroupTestLauncher(t testing.TB, cfg Config) *Launcher {
	t.Helper()
	sandboxtest.NeedRoot(t)
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = sandboxtest.CgroupParent(t)
	}
	if cfg.KillGrace == 0 {
		cfg.KillGrace = 2 * time.Second
	}
	l, err := NewLauncher(cfg)
	sandboxtest.Need(t, "sandbox (install bubblewrap to run this test)", err)
	t.Cleanup(func() { l.Close() })
	return l
}

// runOn runs p on l with a fresh workspace and a bound on its duration.
func runOn(t *testing.T, l *Launcher, p Policy) result {
	t.Helper()
	p.Workspace = sandboxtest.Dir(t)
	var out, errb sandboxtest.SyncBuffer
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	proc, err := l.Start(ctx, p, Stdio{Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("start %q for tenant %q: %v", p.Command, p.Tenant, err)
	}
	exit := proc.Wait()
	return result{out.String(), errb.String(), exit}
}

// startHeld starts p, which prints "held" once it holds what it holds and
// then waits for a line on stdin; it is released and reaped when the test
// ends.
func startHeld(t *testing.T, l *Launcher, p Policy) *Process {
	t.Helper()
	p.Workspace = sandboxtest.Dir(t)
	var out sandboxtest.SyncBuffer
	proc, err := l.Start(t.Context(), p, Stdio{Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatalf("start %q for tenant %q: %v", p.Command, p.Tenant, err)
	}
	t.Cleanup(func() {
		proc.Kill()
		proc.Wait()
	})
	waitFor(t, &out, "held")
	return proc
}

// cgroupAssertUnder fails unless every directory of proc's cgroup is an
// execution directory directly inside tenant's directory.
func cgroupAssertUnder(t *testing.T, l *Launcher, proc *Process, tenant string) {
	t.Helper()
	if proc.cg == nil || len(proc.cg.Dirs()) == 0 {
		t.Fatalf("execution of tenant %q has no cgroup", tenant)
	}
	want := filepath.Join(l.cfg.CgroupParent, "tenant-"+tenant)
	for _, dir := range proc.cg.Dirs() {
		if !strings.HasSuffix(filepath.Dir(dir), "/"+want) {
			t.Errorf("execution cgroup %s is not inside %s", dir, want)
		}
	}
}

// cgroupAssertTenantGone fails if tenant's directory is left in any
// hierarchy after its last execution ended.
func cgroupAssertTenantGone(t *testing.T, l *Launcher, tenant string) {
	t.Helper()
	for _, hier := range sandboxtest.CgroupHierarchies(t) {
		dir := filepath.Join(hier, l.cfg.CgroupParent, "tenant-"+tenant)
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is left after the tenant's last execution (stat: %v)", dir, err)
		}
	}
}

// TestStartFailingBeforeItsCgroupWasTaken: the cgroup is made while the
// start prepares the rest (cgroupAhead); a start that fails meanwhile (a
// bind source that is gone) removes it, and with it its tenant's
// directory.
func TestStartFailingBeforeItsCgroupWasTaken(t *testing.T) {
	t.Parallel()
	l := cgroupTestLauncher(t, Config{TenantLimits: Limits{Pids: 64}})
	cgroupRequire(t, l.cgroups.Info().Pids, "a pids ceiling", l.cgroups.Info())
	p := Policy{Command: sh("true"), Tenant: "a", Workspace: sandboxtest.Dir(t),
		Binds: []Bind{{Source: filepath.Join(t.TempDir(), "gone"), Dest: "/mnt/gone"}}}
	proc, err := l.Start(t.Context(), p, Stdio{})
	if err == nil {
		proc.Wait()
		t.Fatal("a start with a bind source that does not exist started")
	}
	if !strings.Contains(err.Error(), "bind source") {
		t.Fatalf("start: %v; want it to fail on the bind source", err)
	}
	cgroupAssertTenantGone(t, l, "a")
}

func TestTenantMemoryCeiling(t *testing.T) {
	t.Parallel()
	l := cgroupTestLauncher(t, Config{TenantLimits: Limits{Memory: 96 << 20}})
	cgroupRequire(t, l.cgroups.Info().Memory, "a memory ceiling", l.cgroups.Info())
	own := Limits{Memory: 80 << 20}
	// The holder keeps 48 MiB in its /tmp: memory that no OOM kill frees
	// and that makes none of its processes a victim. The grower's tail
	// holds 56 MiB of one line: alone it fits its own 80 MiB, beside the
	// holder it passes the tenant's 96 MiB, and it is then the largest.
	holder := startHeld(t, l, Policy{Command: sh("head -c 50331648 /dev/zero > /tmp/fill && echo held; read x"), Tenant: "a", Limits: own})
	cgroupAssertUnder(t, l, holder, "a")
	grow := Policy{Command: sh("head -c 58720256 /dev/zero | tail > /dev/null"), Limits: own}

	grow.Tenant = "b"
	if r := runOn(t, l, grow); !r.exit.Success() {
		t.Errorf("tenant b's grower, alone under its tenant's ceiling, failed: %v", r)
	}
	grow.Tenant = "a"
	r := runOn(t, l, grow)
	if r.exit.Success() || r.exit.Limit != LimitMemory || !strings.Contains(r.exit.String(), "memory ceiling") {
		t.Errorf("tenant a's grower above the tenant's 96 MiB: %v; want it killed at the memory ceiling", r)
	}
	if _, err := holder.Stdin().Write([]byte("\n")); err != nil {
		t.Fatalf("release the holder: %v", err)
	}
	if exit := holder.Wait(); !exit.Success() {
		t.Errorf("the holder, not the largest, was hit: %s", exit)
	}
	cgroupAssertTenantGone(t, l, "a")
	cgroupAssertTenantGone(t, l, "b")
}

func TestTenantPidsCeiling(t *testing.T) {
	t.Parallel()
	l := cgroupTestLauncher(t, Config{TenantLimits: Limits{Pids: 40}})
	cgroupRequire(t, l.cgroups.Info().Pids, "a pids ceiling", l.cgroups.Info())
	own := Limits{Pids: 30}
	// 20 sleeps, sh and bwrap's two take 23 of the tenant's 40; the forker
	// needs 27, within its own 30 but not within the tenant's 17 left.
	holder := startHeld(t, l, Policy{Command: sh("for i in $(seq 20); do sleep 1000 & done; echo held; read x"), Tenant: "a", Limits: own})
	cgroupAssertUnder(t, l, holder, "a")
	forker := Policy{Command: sh("for i in $(seq 24); do sleep 1000 & done; echo forked"), Limits: own}

	forker.Tenant = "b"
	if r := runOn(t, l, forker); !r.exit.Success() || !strings.Contains(r.stdout, "forked") {
		t.Errorf("tenant b's forker, alone under its tenant's ceiling, failed: %v", r)
	}
	forker.Tenant = "a"
	r := runOn(t, l, forker)
	if r.exit.Success() || r.exit.Limit != LimitPids || strings.Contains(r.stdout, "forked") {
		t.Errorf("tenant a's forker above the tenant's 40 pids: %v; want it stopped at the pids ceiling", r)
	}
	holder.Stdin().Write([]byte("\n"))
	if exit := holder.Wait(); !exit.Success() {
		t.Errorf("holder: %s", exit)
	}
	cgroupAssertTenantGone(t, l, "a")
}

func TestTenantCPUWeight(t *testing.T) {
	t.Parallel()
	l := cgroupTestLauncher(t, Config{TenantLimits: Limits{CPUWeight: 100}})
	cgroupRequire(t, l.cgroups.Info().CPU, "a cpu weight", l.cgroups.Info())
	spin := Policy{Command: sh("echo held; while :; do :; done")}
	spin.Tenant = "a"
	var many []*Process
	for range 8 {
		many = append(many, startHeld(t, l, spin))
	}
	spin.Tenant = "b"
	one := startHeld(t, l, spin)
	usage := func() (a, b time.Duration) {
		for _, p := range many {
			a += p.cg.Events().CPUUsage
		}
		return a, one.cg.Events().CPUUsage
	}
	a0, b0 := usage()
	time.Sleep(1500 * time.Millisecond)
	a1, b1 := usage()
	da, db := a1-a0, b1-b0
	// Equal tenant weights give tenant b's one spinner about as much CPU
	// as tenant a's eight together (0.9 here when alone); as nine peers
	// it gets an eighth of theirs (0.126 without tenant weights). The
	// scheduler splits a group's weight between CPUs by its load there,
	// so on a busy machine b's one CPU may give b two thirds and a the
	// rest of both: half of a's, which one full run measured (0.496).
	// A quarter still tells the two apart.
	t.Logf("cpu over 1.5 s: tenant a (8 spinners) %v, tenant b (1 spinner) %v", da, db)
	if da <= 0 || float64(db) < 0.25*float64(da) {
		t.Errorf("tenant b got %v of CPU beside tenant a's %v: want at least a quarter as much with equal tenant weights (an eighth without)", db, da)
	}
	cgroupAssertUnder(t, l, one, "b")
}

func TestTenantCeilingUnenforceable(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	// A root without cgroups cannot enforce any ceiling.
	l := cgroupTestLauncher(t, Config{CgroupRoot: t.TempDir(), TenantLimits: Limits{Memory: 64 << 20}})
	_, err := l.Start(t.Context(), Policy{Command: []string{"true"}, Workspace: sandboxtest.Dir(t), Tenant: "a"}, Stdio{})
	if !errors.Is(err, ErrUnenforceable) || !strings.Contains(err.Error(), "memory") {
		t.Errorf("start under an unenforceable tenant memory ceiling: %v, want ErrUnenforceable naming memory", err)
	}
	if r := runOn(t, l, Policy{Command: []string{"true"}}); !r.exit.Success() {
		t.Errorf("an execution without a tenant has no tenant ceiling to miss: %v", r)
	}
}

func TestTenantInvalidConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"rlimit as tenant limit", Config{TenantLimits: Limits{CPUSeconds: 10}}, "memory, pids and cpu weight"},
		{"negative memory", Config{TenantLimits: Limits{Memory: -1}}, "memory"},
		{"tiny memory", Config{TenantLimits: Limits{Memory: 1 << 20}}, "memory"},
		{"tiny pids", Config{TenantLimits: Limits{Pids: 2}}, "pids"},
		{"pids below what one execution needs", Config{TenantLimits: Limits{Pids: 7}}, "minimum 8"},
		{"cpu weight", Config{TenantLimits: Limits{CPUWeight: 10001}}, "cpu weight"},
		{"parent with a slash", Config{CgroupParent: "a/b"}, "cgroup parent"},
		{"parent dot-dot", Config{CgroupParent: ".."}, "cgroup parent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := NewLauncher(tt.cfg)
			if err == nil {
				l.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewLauncher(%+v) = %v, want an error naming %q", tt.cfg, err, tt.want)
			}
		})
	}
}

func TestPolicyTenant(t *testing.T) {
	t.Parallel()
	for _, tenant := range []string{"", "a", "acme", "acme-1_x", "0", strings.Repeat("z", 63)} {
		p := validPolicy()
		p.Tenant = tenant
		if err := p.Normalize().Validate(); err != nil {
			t.Errorf("tenant %q: %v, want valid", tenant, err)
		}
	}
	for _, tenant := range []string{".", "..", "a/b", "../x", "-a", "_a", "A", "a.b", "a b", "a\x00", "é", strings.Repeat("z", 64)} {
		p := validPolicy()
		p.Tenant = tenant
		err := p.Normalize().Validate()
		if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "tenant") {
			t.Errorf("tenant %q: %v, want ErrInvalidPolicy naming the tenant", tenant, err)
		}
	}
}

func FuzzPolicyTenant(f *testing.F) {
	for _, s := range []string{"a", ".", "..", "a/b", "acme-1", strings.Repeat("x", 63)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tenant string) {
		p := validPolicy()
		p.Tenant = tenant
		if p.Normalize().Validate() != nil || tenant == "" {
			return
		}
		// An accepted tenant stays exactly one element below the parent.
		parent := "/sys/fs/cgroup/x/termgate"
		joined := filepath.Join(parent, "tenant-"+tenant)
		if filepath.Dir(joined) != parent || filepath.Base(joined) != "tenant-"+tenant {
			t.Errorf("accepted tenant %q escapes %s: %s", tenant, parent, joined)
		}
	})
}
