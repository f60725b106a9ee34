package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// apparmorParser finds apparmor_parser, which Debian keeps in /usr/sbin
// or /sbin, outside a user's PATH.
func apparmorParser(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("apparmor_parser"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/apparmor_parser", "/sbin/apparmor_parser"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("apparmor_parser not found: install Debian's apparmor package (.ci/deps)")
	}
	t.Skip("apparmor_parser not found: install Debian's apparmor package to parse the profile")
	return ""
}

// TestManifestAppArmorParses: apparmor_parser reads the 3.0 profile
// without a kernel (-Q -K: parse and compile only), and the 4.0 one is
// the same text with the 4.0 abi and its two rules.
func TestManifestAppArmorParses(t *testing.T) {
	t.Parallel()
	parser := apparmorParser(t)
	code, v3, stderr := runCLI(t, "", "manifest", "apparmor", "--abi", "3.0")
	if code != 0 {
		t.Fatalf("status %d: %s", code, stderr)
	}
	path := filepath.Join(t.TempDir(), "termgate")
	if err := os.WriteFile(path, []byte(v3), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), parser, "-Q", "-K", path).CombinedOutput(); err != nil {
		t.Fatalf("apparmor_parser -Q -K: %v\n%s\n%s", err, out, v3)
	}
	_, v4, _ := runCLI(t, "", "manifest", "apparmor")
	want := strings.Replace(v3, "abi <abi/3.0>,", "abi <abi/4.0>,", 1)
	want = strings.Replace(want, "  dbus,\n", "  dbus,\n  mqueue,\n", 1)
	want = strings.Replace(want, "  # bwrap makes a user namespace for every sandbox, as the tenant's uid.\n",
		"  # bwrap makes a user namespace for every sandbox, as the tenant's uid.\n  userns,\n", 1)
	if v4 != want {
		t.Errorf("the 4.0 profile is not the 3.0 one with its abi, mqueue and userns:\n%s", v4)
	}
	for _, rule := range []string{"profile termgate ", "  mount,\n", "  umount,\n", "  pivot_root,\n", "  ptrace,\n", "  signal,\n", "  capability,\n"} {
		if !strings.Contains(v3, rule) {
			t.Errorf("the profile lacks %q", rule)
		}
	}
	if code, _, _ := runCLI(t, "", "manifest", "apparmor", "--abi", "2.0"); code != 2 {
		t.Errorf("--abi 2.0: status %d, want 2", code)
	}
}
