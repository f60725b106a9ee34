package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/termgate/termgate/sandbox"
)

// TestTenantsRunAsTheirOwnHostIdentity: each tenant's executions run as a
// host uid of its own, from sandbox.DefaultTenantUIDs, in a workspace whose
// path does not name the tenant.
func TestTenantsRunAsTheirOwnHostIdentity(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("host identities need root")
	}
	e := newAPIEnv(t, nil)
	for _, tenant := range []string{"acme", "globex"} {
		tok := e.token(t, tenant, allScopes...)
		e.must(t, 201, "POST", "/v1/executions", tok, shStart("touch", "touch /workspace/mine"), nil)
		if tr := e.readAll(t, tok, "touch"); tr.exit == nil || tr.exit.Code != 0 {
			t.Fatalf("%s: %+v", tenant, tr)
		}
	}
	entries, err := e.srv.cfg.Workspaces.List()
	if err != nil || len(entries) != 2 {
		t.Fatalf("workspaces %+v, %v", entries, err)
	}
	owners := map[uint32]string{}
	for _, w := range entries {
		fi, err := os.Stat(filepath.Join(w.Path, "mine"))
		if err != nil {
			t.Fatal(err)
		}
		uid := fi.Sys().(*syscall.Stat_t).Uid
		if uid != w.UID || !sandbox.DefaultTenantUIDs.Contains(uid) || strings.Contains(w.Path, w.Tenant) {
			t.Errorf("%s: file owned by %d in %s; workspace uid %d", w.Tenant, uid, w.Path, w.UID)
		}
		owners[uid] = w.Tenant
	}
	if len(owners) != 2 {
		t.Errorf("two tenants share a host uid: %v", owners)
	}
}
