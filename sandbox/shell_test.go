//go:build linux

package sandbox

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// dataDests lists where the plan's data files go, with the bytes each
// gets.
func dataDests(pl plan) map[string]string {
	out := map[string]string{}
	for i, o := range pl.opts {
		if o != "--file" {
			continue
		}
		fd, _ := strconv.Atoi(pl.opts[i+1])
		if f := pl.files[fd-firstFileFD]; f.kind == fileData {
			out[pl.opts[i+2]] = string(f.data)
		}
	}
	return out
}

// TestPlanNamesLocalhost: every sandbox has an /etc/hosts that names
// localhost and its hostname, and an /etc/hostname; with host networking
// the host's own /etc/hosts is shown instead.
func TestPlanNamesLocalhost(t *testing.T) {
	t.Parallel()
	data := dataDests(testPlan(t, Policy{Command: []string{"true"}}))
	if h := data["/etc/hosts"]; !strings.Contains(h, "127.0.0.1\tlocalhost\n") || !strings.Contains(h, "::1\tlocalhost") || !strings.Contains(h, "\t"+DefaultHostname+"\n") {
		t.Errorf("/etc/hosts = %q", h)
	}
	if h := data["/etc/hostname"]; h != DefaultHostname+"\n" {
		t.Errorf("/etc/hostname = %q", h)
	}
	layout := testLayout
	layout.hostNet = map[string][]byte{"/etc/hosts": []byte("127.0.0.1 localhost\n10.0.0.1 db\n")}
	p := Policy{Command: []string{"true"}, Workspace: "/srv/ws/tenant", Network: NetworkHost}.Normalize()
	data = dataDests(buildPlan(p, layout, nil))
	if h := data["/etc/hosts"]; h != "127.0.0.1 localhost\n10.0.0.1 db\n" {
		t.Errorf("with host networking, /etc/hosts = %q", h)
	}
}

// TestSandboxResolvesLocalhost: a program in a real sandbox finds
// localhost and its own hostname through the name service.
func TestSandboxResolvesLocalhost(t *testing.T) {
	t.Parallel()
	r := runPolicy(t, Policy{Command: sh("getent hosts localhost; getent hosts \"$(hostname)\"; cat /etc/hostname")})
	if !r.exit.Success() || !strings.Contains(r.stdout, "localhost") || !strings.Contains(r.stdout, "127.0.1.1") || !strings.HasSuffix(r.stdout, DefaultHostname+"\n") {
		t.Fatalf("name lookups in the sandbox: %v", r)
	}
}

// TestPrivateProcShowsOnlyTheSandbox: with a private procfs, ps and top
// work and list the sandbox's own processes, none of the host's; the
// sandbox's pid 1 (bwrap, started with the server's environment) keeps its
// environment to itself.
func TestPrivateProcShowsOnlyTheSandbox(t *testing.T) {
	t.Parallel()
	r := runPolicy(t, Policy{Proc: ProcPrivate, Command: sh(`ps -e -o pid=,comm=; echo ---; top -b -n 1 >/dev/null && echo top=ok; ` +
		`cat /proc/1/environ >/dev/null 2>&1 && echo environ=open || echo environ=closed`)})
	list, rest, ok := strings.Cut(r.stdout, "---\n")
	if !r.exit.Success() || !ok {
		t.Fatalf("ps in the sandbox: %v", r)
	}
	var comms []string
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("ps line %q in %v", line, r)
		}
		comms = append(comms, f[1])
	}
	slices.Sort(comms)
	if want := []string{"bwrap", "ps", "sh"}; !slices.Equal(comms, want) {
		t.Errorf("processes seen: %q, want %q (the sandbox's own only)", comms, want)
	}
	if !strings.Contains(rest, "top=ok") || !strings.Contains(rest, "environ=closed") {
		t.Errorf("top or /proc/1/environ: %v", r)
	}
}

// TestEtcCopiesAreTheHostsFilesAndNoMounts: the small /etc files a
// sandbox gets are copies, not binds (no line of the mount table), with
// the host's bytes; the files termgate writes are not binds either.
func TestEtcCopiesAreTheHostsFilesAndNoMounts(t *testing.T) {
	t.Parallel()
	l := needLauncher(t)
	var copied []string
	want := map[string]string{}
	for e, entry := range l.layout.etc {
		if entry.copy {
			data, err := os.ReadFile(e)
			if err != nil {
				t.Fatal(err)
			}
			copied = append(copied, e)
			want[e] = fmt.Sprintf("%x", sha256.Sum256(data))
		}
	}
	if len(copied) == 0 {
		t.Skip("this host has no small /etc file to copy")
	}
	slices.Sort(copied)
	files := append(slices.Clone(copied), "/etc/passwd", "/etc/group", "/etc/hostname", "/etc/hosts")
	script := "sha256sum " + strings.Join(copied, " ") + "; for f in " + strings.Join(files, " ") +
		`; do grep -q " $f " /proc/self/mountinfo && echo "MOUNT $f"; stat -c "%a $f" $f; done`
	r := runPolicy(t, Policy{Command: sh(script), Proc: ProcPrivate})
	if !r.exit.Success() || strings.Contains(r.stdout, "MOUNT") {
		t.Fatalf("copied /etc files: %v", r)
	}
	for _, e := range copied {
		if !strings.Contains(r.stdout, want[e]+"  "+e+"\n") {
			t.Errorf("%s in the sandbox is not the host's (sha256 %s): %v", e, want[e], r)
		}
	}
	for _, f := range files {
		if !strings.Contains(r.stdout, "444 "+f+"\n") {
			t.Errorf("%s is not mode 444: %v", f, r)
		}
	}
}

// TestOpenCopiedRefusesWhatABindWouldNotShow: a host /etc file is only
// copied while it is a regular file everyone may read; a file made
// private, a directory or a symlink since the launcher started fails the
// start instead.
func TestOpenCopiedRefusesWhatABindWouldNotShow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	public, private := filepath.Join(dir, "public"), filepath.Join(dir, "private")
	for name, mode := range map[string]os.FileMode{public: 0o644, private: 0o600} {
		if err := os.WriteFile(name, []byte("x\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(public, link); err != nil {
		t.Fatal(err)
	}
	f, err := openCopied(public)
	if err != nil {
		t.Fatalf("a public file: %v", err)
	}
	f.Close()
	for _, p := range []string{private, dir, link} {
		if f, err := openCopied(p); !errors.Is(err, ErrUnavailable) {
			if f != nil {
				f.Close()
			}
			t.Errorf("openCopied(%s) = %v, want an error wrapping ErrUnavailable", p, err)
		}
	}
}
