//go:build linux

package sandbox

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

func TestResolvesListsEveryHostPathOfThePlan(t *testing.T) {
	t.Parallel()
	l := &Launcher{bwrap: "/opt/bin/bwrap", layout: hostLayout{
		init: "/usr/local/bin/termgate", dirs: []string{"/lib32"},
		etc: map[string]etcEntry{"/etc/ld.so.cache": {}, "/etc/services": {copy: true}, "/etc/localtime": {link: "/usr/share/zoneinfo/UTC"}},
	}}
	got := l.resolves(Policy{Workspace: "/srv/ws/t", Binds: []Bind{{Source: "/data/shared", Dest: "/shared"}}})
	for _, want := range []string{"/opt/bin/bwrap", "/usr", "/dev/null", "/proc/self", "/usr/local/bin/termgate",
		"/srv/ws/t", "/lib32", "/etc/ld.so.cache", "/data/shared"} {
		if !slices.Contains(got, want) {
			t.Errorf("resolves lacks %s: %q", want, got)
		}
	}
	for _, absent := range []string{"/etc/services", "/etc/localtime"} {
		if slices.Contains(got, absent) {
			t.Errorf("resolves lists %s, which bwrap gets as a descriptor or makes as a link: %q", absent, got)
		}
	}
}

// TestWorkspaceOnAMountALeanNamespaceDrops: a workspace on /dev/shm, a
// mount a lean namespace keeps only for a spawn that resolves a path on
// it, starts, forked by the launcher and by a keeper.
func TestWorkspaceOnAMountALeanNamespaceDrops(t *testing.T) {
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
