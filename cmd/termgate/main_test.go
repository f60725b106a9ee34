package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want uint64
		err  bool
	}{
		{"512", 512, false}, {"64K", 64 << 10, false}, {"64M", 64 << 20, false}, {"1G", 1 << 30, false},
		{"2T", 2 << 40, false}, {"64MiB", 64 << 20, false}, {"64MB", 64 << 20, false}, {"64m", 64 << 20, false},
		{"", 0, true}, {"M", 0, true}, {"-1", 0, true}, {"1.5G", 0, true}, {"12X", 0, true}, {"99999999999T", 0, true},
	}
	for _, c := range cases {
		got, err := parseSize(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, error %v", c.in, got, err, c.want, c.err)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1", "64M", "1GiB", "", "kB", "18446744073709551615"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseSize(s)
		if err == nil && v > 1<<63-1 {
			t.Fatalf("parseSize(%q) = %d overflows int64", s, v)
		}
	})
}

// runCLI runs the command in-process and returns its exit status.
func runCLI(t testing.TB, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(t.Context(), args, strings.NewReader(stdin), &out, &errb)
	return exitCode(err, &errb), out.String(), errb.String()
}

func TestUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{}, {"bogus"}, {"run"}, {"run", "--bogus"}, {"completion"}, {"help", "bogus"},
		{"attach", "--id", "x", "--after", "5"}, // --after needs --incarnation
		{"logs", "--id", "x", "--after", "5"},   // so does logs
	} {
		code, _, stderr := runCLI(t, "", args...)
		if code != 2 || stderr == "" {
			t.Errorf("termgate %q: status %d, stderr %q; want 2 and a message", args, code, stderr)
		}
	}
}

// TestImportDirection keeps the package graph one-way: cmd -> gateway ->
// session -> (replay, sandbox, session/screen), gateway -> gateway/wire <- gateway/client,
// gateway -> gateway/auth -> gateway/wire, cmd -> web; replay, sandbox,
// session/screen and gateway/wire import nothing of termgate's, gateway/client and gateway/auth
// nothing but gateway/wire.
func TestImportDirection(t *testing.T) {
	t.Parallel()
	allowed := map[string][]string{
		"sandbox/fdio": {}, "sandbox": {"sandbox/fdio"}, "replay": {}, "web": {}, "sandbox/internal/workspace": {}, "sandbox/internal/sandboxinit": {},
		"sandbox/internal/seccomp": {}, "sandbox/internal/procevents": {}, "sandbox/internal/cgroup": {},
		"sandbox/internal/forker": {"sandbox/internal/cgroup/v1thread", "sandbox/internal/mountns"}, "sandbox/internal/mountns": {}, "sandbox/internal/netredirect": {}, "sandbox/internal/fsid": {}, "sandbox/files": {"sandbox/internal/fsid"}, "sandbox/netpolicy/internal/proxy": {"sandbox/fdio", "sandbox/internal/netredirect"},
		"sandbox/netpolicy":           {"sandbox/netpolicy/internal/proxy", "sandbox/fdio", "sandbox/internal/netredirect"},
		"session/screen":              {},
		"session/execid":              {},
		"session/internal/statedir":   {"replay", "sandbox", "sandbox/fdio"},
		"session":                     {"replay", "sandbox", "sandbox/fdio", "sandbox/netpolicy", "sandbox/netpolicy/internal/proxy", "session/screen", "session/execid"},
		"gateway/wire":                {},
		"gateway/cluster":             {"session/execid"},
		"gateway/internal/park":       {"sandbox/fdio"},
		"gateway/internal/rate":       {},
		"gateway/internal/transcript": {},
		"gateway/audit":               {"gateway/wire", "gateway/internal/rate"},
		"gateway/auth":                {"gateway/wire"},
		"gateway":                     {"session", "session/screen", "replay", "sandbox", "sandbox/fdio", "sandbox/files", "sandbox/internal/fsid", "sandbox/netpolicy", "sandbox/netpolicy/internal/proxy", "gateway/wire", "gateway/auth", "gateway/audit", "gateway/cluster", "session/execid"},
		"gateway/client":              {"gateway/wire"},
		// The test kits serve tests only (TestKitsServeTestsOnly).
		"sandbox/sandboxtest": {}, "gateway/gatewaytest": {"gateway/wire"}, "session/sessiontest": {"session", "session/screen", "session/execid", "replay", "sandbox", "sandbox/fdio", "sandbox/netpolicy", "sandbox/netpolicy/internal/proxy"},
	}
	const mod = "github.com/termgate/termgate/"
	for pkg, ok := range allowed {
		cmd := exec.CommandContext(context.Background(), "go", "list", "-deps", "-f", "{{.ImportPath}}", "../../"+pkg)
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("go list %s: %v: %s", pkg, err, ee.Stderr)
			}
			t.Fatalf("go list %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			name, ours := strings.CutPrefix(dep, mod)
			if !ours || name == pkg {
				continue
			}
			if owner, _, internal := strings.Cut(name, "/internal/"); internal && (owner == pkg || contains(ok, owner)) {
				continue // a package's internals count as the package
			}
			if !contains(ok, name) {
				t.Errorf("%s imports %s", pkg, name)
			}
		}
	}
}

// TestKitsServeTestsOnly: no package's own code imports a test kit
// (sandboxtest, sessiontest, gatewaytest); only tests do.
func TestKitsServeTestsOnly(t *testing.T) {
	t.Parallel()
	out, err := exec.CommandContext(context.Background(), "go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		for _, imp := range strings.Fields(imports) {
			if isKit(imp) && !isKit(pkg) {
				t.Errorf("%s imports the test kit %s", pkg, imp)
			}
		}
	}
}

// isKit reports whether pkg is one of termgate's test kits.
func isKit(pkg string) bool {
	name, ours := strings.CutPrefix(pkg, "github.com/termgate/termgate/")
	return ours && strings.HasSuffix(name, "test") && strings.Contains(name, "/")
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
