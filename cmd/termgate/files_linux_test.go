package main

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCpAndLsFiles: termgate cp puts a file into the tenant's workspace
// with its mode, where a sandbox reads the same bytes; termgate ls :PATH
// lists it; cp brings it back whole, with its mode; wrong arguments are
// usage errors.
func TestCpAndLsFiles(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	tok := g.token(t, "acme", allScopes+" files:read files:write")
	dir := t.TempDir()
	data := make([]byte, 5<<20+123)
	rand.Read(data)
	src := filepath.Join(dir, "blob.bin")
	os.WriteFile(src, data, 0o750)
	flags := []string{"--url", g.url, "--token", tok}
	if code, _, stderr := runCLI(t, "", append(append([]string{"cp"}, flags...), src, ":in/")...); code != 0 {
		t.Fatalf("cp up: %d %q", code, stderr)
	}
	code, out, stderr := runCLI(t, "", append(append([]string{"ls"}, flags...), ":in")...)
	if code != 0 || !strings.HasPrefix(out, fmt.Sprintf("file    0750 %12d ", len(data))) || !strings.HasSuffix(out, " blob.bin\n") {
		t.Errorf("ls :in: %d %q %q", code, out, stderr)
	}
	code, out, stderr = runCLI(t, "", append(append([]string{"run"}, flags...), "--", "/bin/sh", "-c", "md5sum < /workspace/in/blob.bin")...)
	if want := fmt.Sprintf("%x  -\n", md5.Sum(data)); code != 0 || out != want {
		t.Errorf("the sandbox's md5sum: %d %q %q, want %q", code, out, stderr, want)
	}
	back := filepath.Join(dir, "back")
	os.Mkdir(back, 0o755)
	if code, _, stderr := runCLI(t, "", append(append([]string{"cp"}, flags...), ":in/blob.bin", back)...); code != 0 {
		t.Fatalf("cp down: %d %q", code, stderr)
	}
	got, _ := os.ReadFile(filepath.Join(back, "blob.bin"))
	fi, _ := os.Stat(filepath.Join(back, "blob.bin"))
	if !bytes.Equal(got, data) || fi == nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("cp down: %d bytes (%d sent), mode %v", len(got), len(data), fi)
	}
	if names, _ := os.ReadDir(back); len(names) != 1 {
		t.Errorf("cp down left %v", names)
	}
	for _, args := range [][]string{{src, back}, {":a", ":b"}, {src}} {
		if code, _, stderr := runCLI(t, "", append(append([]string{"cp"}, flags...), args...)...); code != 2 {
			t.Errorf("cp %q: %d %q, want a usage error", args, code, stderr)
		}
	}
	if code, _, stderr := runCLI(t, "", append(append([]string{"cp"}, flags...), ":nothing", back)...); code != 1 || !strings.Contains(stderr, "not_found") {
		t.Errorf("cp of nothing: %d %q", code, stderr)
	}
}
