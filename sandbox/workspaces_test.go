//go:build linux

package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// waitForPing writes "ready", waits (at most 30 s) for /workspace/ping,
// copies it to /workspace/pong, then writes past its 8 MiB quota.
const waitForPing = `echo ready
i=0; while [ $i -lt 600 ] && [ ! -f /workspace/ping ]; do sleep 0.05; i=$((i+1)); done
cat /workspace/ping > /workspace/pong
dd if=/dev/zero of=/workspace/big bs=1M count=16 2>&1; rm -f /workspace/big; echo done`

// TestWorkspaceSurvivesRestart: an execution runs in its tenant's
// workspace while the server restarts (Workspaces closed, another opened
// with Adopt on the same root). Nothing of its workspace is removed, and
// the new server's mount is the execution's filesystem: a file each
// writes, the other reads. The quota holds inside the sandbox throughout.
func TestWorkspaceSurvivesRestart(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	l := needLauncher(t)
	cfg := WorkspacesConfig{Root: filepath.Join(sandboxtest.Dir(t), "ws"), TenantUIDs: testTenantUIDs, Bytes: 8 << 20, Inodes: 128, Adopt: true}
	w, err := OpenWorkspaces(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var out sandboxtest.SyncBuffer
	proc, err := l.Start(ctx, tenantPolicy(t, w, "acme", waitForPing), Stdio{Stdout: &out})
	if err != nil {
		w.Close()
		t.Fatal(err)
	}
	defer func() { cancel(); proc.Wait() }()
	waitFor(t, &out, "ready")
	if err := w.Close(); err != nil { // the restart
		t.Fatal(err)
	}

	w2, err := OpenWorkspaces(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if got := w2.Recovered(); len(got) != 0 {
		t.Errorf("the restart removed %q, in use by a running execution", got)
	}
	if got := w2.Adopted(); len(got) != 1 || !strings.HasPrefix(got[0], "loop /dev/loop") {
		t.Errorf("adopted %q, want the workspace's loop device", got)
	}
	ws, err := w2.Prepare("acme")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws.Path, "ping"), []byte("through the new mount"), 0o644); err != nil {
		t.Fatal(err)
	}
	exit := proc.Wait()
	if !exit.Success() || !strings.Contains(out.String(), "No space left on device") || !strings.Contains(out.String(), "done") {
		t.Fatalf("execution across the restart: %s, output %q", exit, out.String())
	}
	if data, err := os.ReadFile(filepath.Join(ws.Path, "pong")); string(data) != "through the new mount" {
		t.Errorf("pong written in the sandbox, read through the new mount: %q, %v", data, err)
	}
}
