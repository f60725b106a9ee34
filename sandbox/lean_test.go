//go:build linux

package sandbox

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

func TestLeanSafe(t *testing.T) {
	t.Parallel()
	l := &Launcher{bwrap: "/usr/bin/bwrap", layout: hostLayout{init: "/usr/local/bin/termgate"}}
	for _, c := range []struct {
		name string
		p    Policy
		want bool
	}{
		{"workspace on /srv", Policy{Workspace: "/srv/ws/t"}, true},
		{"workspace on /dev/shm", Policy{Workspace: "/dev/shm/ws"}, false},
		{"a bind from /sys", Policy{Workspace: "/srv/ws/t", Binds: []Bind{{Source: "/srv/data", Dest: "/data"}, {Source: "/sys/kernel", Dest: "/k"}}}, false},
		{"a bind from /proc", Policy{Workspace: "/srv/ws/t", Binds: []Bind{{Source: "/proc/sys/fs/binfmt_misc", Dest: "/b"}}}, false},
		{"binds elsewhere", Policy{Workspace: "/srv/ws/t", Binds: []Bind{{Source: "/srv/data", Dest: "/data"}}}, true},
	} {
		if got := l.leanSafe(c.p); got != c.want {
			t.Errorf("%s: leanSafe = %v, want %v", c.name, got, c.want)
		}
	}
	for _, path := range []string{"/dev/shm/bwrap", "/sys/x/bwrap"} {
		l := &Launcher{bwrap: path, layout: hostLayout{init: "/usr/local/bin/termgate"}}
		if l.leanSafe(Policy{Workspace: "/srv/ws/t"}) {
			t.Errorf("bwrap at %s: leanSafe", path)
		}
	}
}

// TestWorkspaceOnAPrunedMount: a workspace on a mount that a lean mount
// namespace leaves out (/dev/shm) still starts, forked by the launcher and
// by a keeper: it is forked from the host's namespace.
func TestWorkspaceOnAPrunedMount(t *testing.T) {
	t.Parallel()
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(info), " /dev/shm ") {
		t.Skip("/dev/shm is no mount of its own here")
	}
	ws, err := os.MkdirTemp("/dev/shm", "termgate-ws-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ws) })
	if err := os.Chmod(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ws+"/marker", []byte("on shm\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]*Launcher{"forked": needLauncher(t), "keeper": keeperLauncher(t, keeperDir(t))} {
		var out, errb sandboxtest.SyncBuffer
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		proc, err := l.Start(ctx, Policy{Key: "shm-" + name, Command: sh("cat /workspace/marker"), Workspace: ws}, Stdio{Stdout: &out, Stderr: &errb})
		if err != nil {
			cancel()
			t.Fatalf("%s: start: %v", name, err)
		}
		exit := proc.Wait()
		cancel()
		if exit.Code != 0 || out.String() != "on shm\n" {
			t.Errorf("%s: exit %s, stdout %q, stderr %q", name, exit, out.String(), errb.String())
		}
	}
}
