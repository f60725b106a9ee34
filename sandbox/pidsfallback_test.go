//go:build linux

package sandbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestPidsFallback: on a host without a pids controller (a cgroup root
// with no hierarchy) a pids ceiling is refused, unless the operator asks
// for RLIMIT_NPROC, which then bounds the execution's processes and is
// reported as a degraded guarantee.
func TestPidsFallback(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	bomb := Policy{Command: sh("bash -c 'ulimit -u'; i=0; while [ $i -lt 64 ]; do sleep 30 & i=$((i+1)); done; echo all started"), Limits: Limits{Pids: 24}}

	strict := cgroupTestLauncher(t, Config{CgroupRoot: t.TempDir()})
	if _, err := strict.Start(t.Context(), Policy{Command: []string{"true"}, Workspace: sandboxtest.Dir(t), Limits: Limits{Pids: 24}}, Stdio{}); !errors.Is(err, ErrUnenforceable) {
		t.Errorf("pids ceiling without a controller and without the fallback: %v, want ErrUnenforceable", err)
	}

	l := cgroupTestLauncher(t, Config{CgroupRoot: t.TempDir(), PidsFallback: true})
	r := runOn(t, l, bomb)
	if !strings.HasPrefix(r.stdout, "24\n") || strings.Contains(r.stdout, "all started") || r.exit.Success() {
		t.Errorf("fork bomb under RLIMIT_NPROC 24: %v, want the limit shown and the bomb refused", r)
	}
	report, err := l.Probe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !report.Ceilings["pids"] {
		t.Errorf("ceilings: %v, want pids enforceable", report.Ceilings)
	}
	g := guarantee(t, report, "pids_ceiling")
	if g.State != Degraded || g.Flag != PidsFallbackFlag {
		t.Errorf("pids_ceiling: %+v, want degraded by %s", g, PidsFallbackFlag)
	}
	if g := guarantee(t, report, "memory_ceiling"); g.State != Missing {
		t.Errorf("memory_ceiling without a controller: %+v, want missing", g)
	}
}

func guarantee(t *testing.T, r Report, name string) Guarantee {
	t.Helper()
	for _, g := range r.Guarantees {
		if g.Name == name {
			return g
		}
	}
	t.Fatalf("no guarantee %q in %+v", name, r.Guarantees)
	return Guarantee{}
}
