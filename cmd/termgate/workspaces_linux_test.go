package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestWorkspacesListsUsageAgainstQuota: the operator sees each tenant's
// uid and its bytes and inodes used and allowed, as text and as JSON,
// while the store holds the root.
func TestWorkspacesListsUsageAgainstQuota(t *testing.T) {
	sandboxtest.NeedRoot(t) // quotas need root
	root := filepath.Join(t.TempDir(), "ws")
	w, err := sandbox.OpenWorkspaces(sandbox.WorkspacesConfig{Root: root, TenantUIDs: sandbox.UIDRange{First: 3980000, Count: 10}, Bytes: 8 << 20, Inodes: 128})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ws, err := w.Prepare("acme")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws.Path, "f"), make([]byte, 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errs strings.Builder
	if err := run(t.Context(), []string{"workspaces", "--workspace-root", root, "--json"}, nil, &out, &errs); err != nil {
		t.Fatalf("workspaces --json: %v, stderr %q", err, errs.String())
	}
	var got struct{ Workspaces []sandbox.WorkspaceEntry }
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil || len(got.Workspaces) != 1 {
		t.Fatalf("json %q: %v", out.String(), err)
	}
	e := got.Workspaces[0]
	if e.Tenant != "acme" || e.UID != ws.UID || !e.Quota || !e.Usage.Mounted || e.Usage.BytesUsed < 3<<20 ||
		e.Usage.BytesAllowed > 8<<20 || e.Usage.InodesAllowed > 128 || e.Usage.InodesUsed == 0 {
		t.Errorf("entry %+v", e)
	}
	out.Reset()
	if err := run(t.Context(), []string{"workspaces", "--workspace-root", root}, nil, &out, &errs); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], "acme") || !strings.Contains(lines[1], "3980000") {
		t.Errorf("table %q", out.String())
	}
}

func TestWorkspaceFlagsRefuseBadValues(t *testing.T) {
	for _, args := range [][]string{
		{"--tenant-uids", "3000000"}, {"--tenant-uids", "0:10"}, {"--tenant-uids", "4294967290:100"},
		{"--tenant-uids", "x:1"}, {"--workspace-quota", "1K"}, {"--workspace-inodes", "10"}, {"--workspace-quota", "-1"},
	} {
		if _, err := parseServe(append([]string{"--dev"}, args...), &strings.Builder{}); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	o, err := parseServe([]string{"--dev", "--tenant-uids", "4000000:500", "--workspace-quota", "0"}, &strings.Builder{})
	if err != nil || o.workspaces.tenantUIDs != (sandbox.UIDRange{First: 4000000, Count: 500}) || o.workspaces.bytes != 0 {
		t.Errorf("parsed %+v, %v", o, err)
	}
	if err := run(t.Context(), []string{"workspaces"}, nil, &strings.Builder{}, &strings.Builder{}); err == nil {
		t.Error("workspaces without a root accepted")
	}
}
