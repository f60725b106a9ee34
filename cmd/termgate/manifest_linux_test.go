package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestManifestSystemdUnit: the unit parses, runs serve with the flags
// given (quoted so that systemd splits them back), keeps the executions
// over a restart, and passes systemd-analyze verify where it exists.
func TestManifestSystemdUnit(t *testing.T) {
	t.Parallel()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	serveArgs := []string{"--jwt-secret-file", "/etc/termgate/secret", "--workspace-root", "/var/lib/term gate/ws",
		"--default-command", `sh -c "echo $HOME at 100%"`, "--listen", "127.0.0.1:9000"}
	code, out, stderr := runCLI(t, "", append([]string{"manifest", "systemd", "--binary", bin}, serveArgs...)...)
	if code != 0 {
		t.Fatalf("status %d: %s", code, stderr)
	}
	u, err := parseINI(out)
	if err != nil {
		t.Fatalf("%v in:\n%s", err, out)
	}
	for _, s := range []string{"Unit", "Service", "Install"} {
		if u[s] == nil {
			t.Errorf("no [%s] section", s)
		}
	}
	svc := u["Service"]
	for k, want := range map[string]string{
		"User": "root", "KillMode": "process", "KillSignal": "SIGTERM", "Restart": "on-failure",
		"RuntimeDirectory": "termgate", "RuntimeDirectoryPreserve": "yes", "NoNewPrivileges": "yes",
	} {
		if got := svc[k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}
	if len(svc["ExecStart"]) != 1 {
		t.Fatalf("ExecStart %q", svc["ExecStart"])
	}
	argv, err := splitExec(svc["ExecStart"][0])
	if err != nil {
		t.Fatal(err)
	}
	want := append([]string{bin, "serve", "--state-dir", defaultUnitStateDir}, serveArgs...)
	if fmt.Sprintf("%q", argv) != fmt.Sprintf("%q", want) {
		t.Errorf("ExecStart runs %q\nwant %q", argv, want)
	}
	verifyUnit(t, out)
}

// verifyUnit runs systemd-analyze verify on unit, when the host has it:
// it is no termgate prerequisite, so it skips even under CI.
func verifyUnit(t *testing.T, unit string) {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skipf("systemd-analyze is not installed: the unit was checked as an ini file only (%v)", err)
	}
	file := filepath.Join(t.TempDir(), "termgate-test.service")
	if err := os.WriteFile(file, []byte(unit), 0o600); err != nil {
		t.Fatal(err)
	}
	// verify reports bad lines on stderr and still exits 0: any output
	// naming the file is a failure.
	out, err := exec.Command(analyze, "verify", file).CombinedOutput()
	if err != nil || strings.Contains(string(out), file) {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestManifestSystemdStateDir: a --state-dir given is kept (in any
// spelling), and flags serve refuses are refused here too.
func TestManifestSystemdStateDir(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--state-dir", "/srv/tg"}, {"--state-dir=/srv/tg"}, {"-state-dir", "/srv/tg"}, {"--workspace-root", "/w", "--state-dir", "/srv/tg"},
	} {
		code, out, stderr := runCLI(t, "", append([]string{"manifest", "systemd", "--dev"}, args...)...)
		u, err := parseINI(out)
		if code != 0 || err != nil {
			t.Fatalf("manifest systemd --dev %q: status %d %s, %v", args, code, stderr, err)
		}
		if exec := strings.Join(u["Service"]["ExecStart"], "\n"); strings.Contains(exec, defaultUnitStateDir) || !strings.Contains(exec, "/srv/tg") {
			t.Errorf("manifest systemd --dev %q: ExecStart=%s", args, exec)
		}
	}
	for _, args := range [][]string{
		{"--no-such-flag"}, {"--dev", "operand"}, {"--network", "bogus", "--dev"}, {"--workspace-root", "/w"},
		{"--binary", "relative/termgate", "--dev"}, {"--binary"}, {"--dev", "--default-command", "new\nline"},
	} {
		code, out, stderr := runCLI(t, "", append([]string{"manifest", "systemd"}, args...)...)
		if code != 2 || out != "" || stderr == "" {
			t.Errorf("manifest systemd %q: status %d, stdout %q, stderr %q; want 2 and a message", args, code, out, stderr)
		}
	}
}

// TestManifestKindHelp: each kind's --help names that kind in its usage
// line and lists its own flags, not another kind's; a bad flag prints the
// same help to stderr.
func TestManifestKindHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind      string
		want, not []string
	}{
		{"systemd", []string{"--binary", "--jwt-secret-file"}, []string{"--server-name", "--image"}},
		{"nginx", []string{"--server-name", "--upstream"}, []string{"--image", "--check-interval"}},
		{"caddy", []string{"--server-name"}, []string{"--image", "--check-interval"}},
		{"kubernetes", []string{"--image", "--replicas", "--jwt-secret-file"}, []string{"--server-name", "--check-interval"}},
		{"haproxy", []string{"--server", "--check-interval", "--bind"}, []string{"--server-name", "--image", "--binary"}},
	} {
		code, out, stderr := runCLI(t, "", "manifest", tc.kind, "--help")
		first, _, _ := strings.Cut(out, "\n")
		if code != 0 || !strings.HasPrefix(first, "Usage: termgate manifest "+tc.kind+" ") {
			t.Errorf("manifest %s --help: status %d, usage line %q (stderr %q)", tc.kind, code, first, stderr)
			continue
		}
		for _, f := range tc.want {
			if !regexp.MustCompile(`(?m)^  ` + f + `( |$)`).MatchString(out) {
				t.Errorf("manifest %s --help lists no %s:\n%s", tc.kind, f, out)
			}
		}
		for _, f := range tc.not {
			if regexp.MustCompile(`(?m)^  ` + f + `( |$)`).MatchString(out) {
				t.Errorf("manifest %s --help lists %s, another kind's:\n%s", tc.kind, f, out)
			}
		}
	}
	if code, _, stderr := runCLI(t, "", "manifest", "haproxy", "--bogus"); code != 2 || !strings.Contains(stderr, "Usage: termgate manifest haproxy ") {
		t.Errorf("manifest haproxy --bogus: status %d, stderr %q; want 2 and haproxy's usage", code, stderr)
	}
}
