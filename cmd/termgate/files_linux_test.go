package main

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/termgate/termgate/sandbox/sandboxtest"
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
	// ID:PATH: beside an execution, relative to the directory it started in.
	if code, _, stderr := runCLI(t, "", append(append([]string{"run"}, flags...), "--id", "beside", "--cwd", "/workspace/in", "--", "/bin/sh", "-c", "true")...); code != 0 {
		t.Fatalf("run: %d %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, "", append(append([]string{"cp"}, flags...), src, "beside:copy.bin")...); code != 0 {
		t.Errorf("cp to ID:PATH: %d %q", code, stderr)
	}
	code, out, _ = runCLI(t, "", append(append([]string{"ls"}, flags...), "beside:")...)
	if code != 0 || !strings.Contains(out, " blob.bin\n") || !strings.Contains(out, " copy.bin\n") {
		t.Errorf("ls beside:: %d %q", code, out)
	}
	if code, _, stderr := runCLI(t, "", append(append([]string{"cp"}, flags...), "beside:copy.bin", filepath.Join(dir, "copy-back.bin"))...); code != 0 {
		t.Errorf("cp from ID:PATH: %d %q", code, stderr)
	} else if got, _ := os.ReadFile(filepath.Join(dir, "copy-back.bin")); !bytes.Equal(got, data) {
		t.Errorf("cp from ID:PATH brought %d bytes back", len(got))
	}
	for _, args := range [][]string{{src, back}, {":a", ":b"}, {src}, {":a", "x:b"}} {
		if code, _, stderr := runCLI(t, "", append(append([]string{"cp"}, flags...), args...)...); code != 2 {
			t.Errorf("cp %q: %d %q, want a usage error", args, code, stderr)
		}
	}
	if code, _, stderr := runCLI(t, "", append(append([]string{"cp"}, flags...), ":nothing", back)...); code != 1 || !strings.Contains(stderr, "not_found") {
		t.Errorf("cp of nothing: %d %q", code, stderr)
	}
}

// TestCpIntoAFullWorkspace: a write the workspace's quota has no room
// for is refused with 507 and the bytes it had written, and leaves
// nothing: the tenant's other files are whole, no temporary file stays,
// and the room is there again for a write that fits.
func TestCpIntoAFullWorkspace(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "--workspace-quota", "8M", "--workspace-inodes", "256")
	tok := g.token(t, "acme", allScopes+" files:read files:write")
	flags := []string{"--url", g.url, "--token", tok}
	dir := t.TempDir()
	keep := bytes.Repeat([]byte("k"), 1<<20)
	os.WriteFile(filepath.Join(dir, "keep"), keep, 0o644)
	big := make([]byte, 12<<20)
	rand.Read(big)
	os.WriteFile(filepath.Join(dir, "big"), big, 0o644)
	if code, _, stderr := runCLI(t, "", append(append([]string{"cp"}, flags...), filepath.Join(dir, "keep"), ":keep")...); code != 0 {
		t.Fatalf("cp keep: %d %q", code, stderr)
	}
	code, _, stderr := runCLI(t, "", append(append([]string{"cp"}, flags...), filepath.Join(dir, "big"), ":sub/big")...)
	if code != 1 || !strings.Contains(stderr, "insufficient_storage") || !strings.Contains(stderr, "bytes were written, and none of them kept") {
		t.Errorf("cp of 12 MiB into 8 MiB: %d %q", code, stderr)
	}
	code, out, _ := runCLI(t, "", append(append([]string{"run"}, flags...), "--", "/bin/sh", "-c", "ls -A /workspace /workspace/sub; md5sum < /workspace/keep")...)
	if want := fmt.Sprintf("%x  -", md5.Sum(keep)); code != 0 || !strings.Contains(out, want) || strings.Contains(out, "termgate") || strings.Contains(out, "big") {
		t.Errorf("after the refused write the workspace holds %q", out)
	}
	if code, _, stderr := runCLI(t, "", append(append([]string{"cp"}, flags...), filepath.Join(dir, "keep"), ":sub/again")...); code != 0 {
		t.Errorf("a write that fits after the refused one: %d %q", code, stderr)
	}
}

// TestCpTrees: a tree of 10,000 files goes into the workspace with cp
// -r (a tar stream), where a sandbox finds every file, and comes back
// the same, modes and symlinks included.
func TestCpTrees(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	tok := g.token(t, "acme", allScopes+" files:read files:write")
	flags := []string{"--url", g.url, "--token", tok}
	src := filepath.Join(t.TempDir(), "tree")
	const dirs, per = 100, 100
	for d := range dirs {
		os.MkdirAll(filepath.Join(src, fmt.Sprintf("d%03d", d)), 0o755)
		for f := range per {
			os.WriteFile(filepath.Join(src, fmt.Sprintf("d%03d/f%03d", d, f)), []byte(fmt.Sprint(d*per+f)), 0o640)
		}
	}
	os.Chmod(filepath.Join(src, "d000/f000"), 0o755)
	os.Symlink("d000/f001", filepath.Join(src, "link"))
	if code, _, stderr := runCLI(t, "", append(append([]string{"cp", "-r"}, flags...), src, ":in/")...); code != 0 {
		t.Fatalf("cp -r up: %d %q", code, stderr)
	}
	code, out, stderr := runCLI(t, "", append(append([]string{"run"}, flags...), "--", "/bin/sh", "-c", "cd /workspace/in/tree && find . -type f | wc -l && cat d099/f099 && readlink link && stat -c %a d000/f000")...)
	if want := fmt.Sprintf("%d\n%dd000/f001\n755\n", dirs*per, dirs*per-1); code != 0 || out != want {
		t.Errorf("the sandbox finds %q (%d %q), want %q", out, code, stderr, want)
	}
	back := t.TempDir()
	if code, _, stderr := runCLI(t, "", append(append([]string{"cp", "-r"}, flags...), ":in/tree", back)...); code != 0 {
		t.Fatalf("cp -r down: %d %q", code, stderr)
	}
	if got, want := treeOf(t, filepath.Join(back, "tree")), treeOf(t, src); got != want {
		t.Errorf("the tree back differs: %d lines against %d", strings.Count(got, "\n"), strings.Count(want, "\n"))
	}
}

// treeOf describes a local tree: each path, its mode, its content or
// target.
func treeOf(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%s %v", rel, fi.Mode())
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			fmt.Fprintf(&b, " %s", c)
		}
		if target, err := os.Readlink(p); err == nil {
			fmt.Fprintf(&b, " -> %s", target)
		}
		b.WriteByte('\n')
		return nil
	})
	return b.String()
}

// TestCpResumesAnUpload: a large upload whose connection breaks resumes
// from the offset the gateway has, and the file arrives byte-exact.
func TestCpResumesAnUpload(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	tok := g.token(t, "acme", allScopes+" files:read files:write")
	// A proxy that cuts the first connection that sends more than 4 MiB.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	gw := strings.TrimPrefix(g.url, "http://")
	var cuts atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", gw)
				if err != nil {
					return
				}
				defer u.Close()
				go io.Copy(c, u)
				limit := int64(1 << 62)
				if cuts.Load() == 0 {
					limit = 4 << 20
				}
				if n, _ := io.Copy(u, io.LimitReader(c, limit)); n == limit {
					cuts.Add(1)
				}
			}()
		}
	}()
	data := make([]byte, 20<<20)
	rand.Read(data)
	src := filepath.Join(t.TempDir(), "big.bin")
	os.WriteFile(src, data, 0o600)
	code, _, stderr := runCLI(t, "", "cp", "--url", "http://"+ln.Addr().String(), "--token", tok, src, ":big.bin")
	if code != 0 || cuts.Load() != 1 {
		t.Fatalf("cp through a proxy that cut it: %d %q, %d cuts", code, stderr, cuts.Load())
	}
	code, out, _ := runCLI(t, "", "run", "--url", g.url, "--token", tok, "--", "/bin/sh", "-c", "md5sum < /workspace/big.bin; ls -A /workspace")
	if want := fmt.Sprintf("%x  -\nbig.bin\n", md5.Sum(data)); code != 0 || out != want {
		t.Errorf("in the sandbox: %q, want %q", out, want)
	}
}

// TestCpOneGiB: a 1 GiB file (256 MiB under -race) goes into the
// workspace and back; a sandbox's checksum of it is the local one.
func TestCpOneGiB(t *testing.T) {
	t.Parallel()
	size := int64(1 << 30)
	if sandboxtest.Race {
		size = 256 << 20
	}
	g := startGateway(t)
	tok := g.token(t, "acme", allScopes+" files:read files:write")
	flags := []string{"--url", g.url, "--token", tok}
	dir := t.TempDir()
	src := filepath.Join(dir, "big")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.New()
	chunk := make([]byte, 1<<20)
	for i := int64(0); i < size; i += int64(len(chunk)) {
		rand.Read(chunk[:64]) // a different start to each MiB
		f.Write(chunk)
		sum.Write(chunk)
	}
	f.Close()
	want := fmt.Sprintf("%x", sum.Sum(nil))
	if code, _, stderr := runCLI(t, "", append(append([]string{"cp"}, flags...), src, ":big")...); code != 0 {
		t.Fatalf("cp up: %d %q", code, stderr)
	}
	code, out, stderr := runCLI(t, "", append(append([]string{"run"}, flags...), "--", "/bin/sh", "-c", "md5sum < /workspace/big")...)
	if code != 0 || out != want+"  -\n" {
		t.Errorf("the sandbox's md5sum: %d %q %q, want %s", code, out, stderr, want)
	}
	os.Remove(src)
	if code, _, stderr := runCLI(t, "", append(append([]string{"cp"}, flags...), ":big", filepath.Join(dir, "back"))...); code != 0 {
		t.Fatalf("cp down: %d %q", code, stderr)
	}
	back, err := os.Open(filepath.Join(dir, "back"))
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	h := md5.New()
	if n, _ := io.Copy(h, back); n != size || fmt.Sprintf("%x", h.Sum(nil)) != want {
		t.Errorf("cp down: %d bytes, md5 %x, want %d bytes, %s", n, h.Sum(nil), size, want)
	}
}
