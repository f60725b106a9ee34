package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// The tests of the sandbox commands, which run on Linux only.

func TestSandboxCommandUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"exec"}, {"exec", "--memory", "lots", "--", "true"}, {"exec", "--network", "bridge", "--", "true"},
		{"exec", "--proc", "host", "--", "true"}, {"exec", "--env", "1A=b", "--", "true"}, {"exec", "--pty", "--no-pty", "--", "true"},
		{"verify", "extra"}, {"exec", "--sandbox-uid", "0", "--", "true"},
	} {
		code, _, stderr := runCLI(t, "", args...)
		if code != 2 || stderr == "" {
			t.Errorf("termgate %q: status %d, stderr %q; want 2 and a message", args, code, stderr)
		}
	}
}

func needBwrap(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		sandboxtest.Unavailable(t, "bwrap not installed")
	}
}

func TestExecStreamsAndExits(t *testing.T) {
	t.Parallel()
	needBwrap(t)
	code, out, stderr := runCLI(t, "piped-in", "exec", "--", "sh", "-c", "cat; echo; echo err >&2; exit 3")
	if code != 3 || out != "piped-in\n" || !strings.Contains(stderr, "err\n") {
		t.Errorf("exec: status %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, _, _ = runCLI(t, "", "exec", "--", "sh", "-c", "kill -INT $$")
	if code != 130 {
		t.Errorf("signal death: status %d, want 130", code)
	}
	code, _, stderr = runCLI(t, "", "exec", "--", "no-such-program")
	if code != 127 || !strings.Contains(stderr, "no-such-program: command not found") {
		t.Errorf("missing program: status %d, stderr %q", code, stderr)
	}
}

func TestExecRefusesUnusableWorkspace(t *testing.T) {
	t.Parallel()
	needBwrap(t)
	code, _, stderr := runCLI(t, "", "exec", "--workspace", "/nonexistent/dir", "--", "true")
	if code != 1 || !strings.Contains(stderr, "workspace") {
		t.Errorf("status %d, stderr %q", code, stderr)
	}
}

func TestVerifyJSON(t *testing.T) {
	t.Parallel()
	needBwrap(t)
	code, out, stderr := runCLI(t, "", "verify", "--json")
	var r struct {
		OK             bool            `json:"ok"`
		Checks         map[string]bool `json:"checks"`
		TenantUIDs     string          `json:"tenant_uids"`
		WorkspaceQuota string          `json:"workspace_quota"`
		TenantCgroups  bool            `json:"tenant_cgroups"`
		Network        struct {
			Proxy    bool   `json:"proxy"`
			Redirect bool   `json:"redirect"`
			Problem  string `json:"problem"`
		} `json:"network_policies"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("verify output is not JSON: %v: %q (stderr %q)", err, out, stderr)
	}
	if code != 0 || !r.OK {
		t.Errorf("verify: status %d, report %s, stderr %q", code, out, stderr)
	}
	for _, c := range []string{"seccomp", "socket_families", "io_uring", "dev_readonly", "terminals_bounded"} {
		if !r.Checks[c] {
			t.Errorf("verify: check %s not reported as holding: %s", c, out)
		}
	}
	if os.Geteuid() == 0 && (!r.Network.Proxy || !r.Network.Redirect || r.Network.Problem != "") {
		t.Errorf("verify as root: network policies' proxy %v, redirect %v (%s), want both", r.Network.Proxy, r.Network.Redirect, r.Network.Problem)
	}
	if os.Geteuid() == 0 && (r.TenantUIDs == "" || !strings.HasPrefix(r.WorkspaceQuota, "ext4 image") || !r.TenantCgroups) {
		t.Errorf("verify as root: tenant ids %q, quota %q, tenant cgroups %v", r.TenantUIDs, r.WorkspaceQuota, r.TenantCgroups)
	}
}
