package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestPythonSDK installs gateway/client/python into a virtual environment
// that sees Debian's python3-httpx, python3-websockets and python3-pytest
// (the package index is out of reach: pip installs with no index and no
// build isolation), runs its pytest suite against a real serve (HTTP,
// WebSocket, cuts mid-stream, blocking and asyncio), and runs README.md's
// example.
func TestPythonSDK(t *testing.T) {
	t.Parallel()
	py := "/usr/bin/python3"
	err := exec.Command(py, "-c", "import httpx, websockets, pytest, ensurepip").Run()
	sandboxtest.Need(t, "python3 with python3-httpx, python3-websockets, python3-pytest and python3-venv", err)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	venv, src := installPythonSDK(t)

	g := startGateway(t, "--ring-bytes", "256K") // test_a_gap_is_exact outruns it
	tok := g.token(t, "acme", allScopes+" files:read files:write")
	env := []string{"TERMGATE_URL=" + g.url, "TERMGATE_TOKEN=" + tok}
	vpy := filepath.Join(venv, "bin", "python")
	out := runIn(ctx, t, src, env, vpy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
	if !regexp.MustCompile(`\b\d+ passed\b`).MatchString(out) || strings.Contains(out, "skipped") {
		t.Errorf("pytest: %s", out)
	}
	readme, _ := os.ReadFile(filepath.Join(src, "README.md"))
	m := regexp.MustCompile("(?s)```python\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no python example")
	}
	example := filepath.Join(dir, "example.py")
	os.WriteFile(example, m[1], 0o644)
	out = runIn(ctx, t, dir, env, vpy, example)
	want := "['Linux', '42'] exit 0\nEvent(seq=1, kind='started', message="
	if !strings.HasPrefix(out, want) || !strings.Contains(out, "\nstreamed\nExit(code=3, signal='', reason='exited')\n") {
		t.Errorf("README.md's example printed %q", out)
	}
}

// installPythonSDK installs a copy of gateway/client/python (pip builds in
// the tree it is given) into a virtual environment over Debian's
// packages, and returns the environment's and the copy's directories.
func installPythonSDK(t testing.TB) (venv, src string) {
	t.Helper()
	dir := t.TempDir()
	src, venv = filepath.Join(dir, "python"), filepath.Join(dir, "venv")
	ctx := context.Background()
	runIn(ctx, t, ".", nil, "cp", "-r", filepath.Join("..", "..", "gateway", "client", "python"), src)
	runIn(ctx, t, dir, nil, "/usr/bin/python3", "-m", "venv", "--system-site-packages", venv)
	runIn(ctx, t, dir, nil, filepath.Join(venv, "bin", "pip"), "install", "--quiet", "--no-index", "--no-build-isolation", src)
	return venv, src
}

// runIn runs name in dir with env added, and returns what it wrote; it
// fails t when it fails.
func runIn(ctx context.Context, t testing.TB, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q in %s: %v\n%s", name, args, dir, err, out)
	}
	return string(out)
}
