package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/termgate/termgate/session/execid"
)

func TestLoadIdentity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	epoch, err := LoadIdentity(dir, "termgate-0")
	if err != nil || !execid.ValidEpoch(epoch) {
		t.Fatalf("LoadIdentity = %q, %v", epoch, err)
	}
	fi, err := os.Stat(filepath.Join(dir, IdentityFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("node.json: %v, %v; want mode 0600", fi.Mode(), err)
	}
	again, err := LoadIdentity(dir, "termgate-0")
	if err != nil || again != epoch {
		t.Fatalf("second LoadIdentity = %q, %v; want %q", again, err, epoch)
	}
	if _, err := LoadIdentity(dir, "termgate-1"); !errors.Is(err, ErrOtherNode) || !strings.Contains(err.Error(), `"termgate-0"`) {
		t.Fatalf("LoadIdentity of another node = %v, want ErrOtherNode naming termgate-0", err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, ".node-*")); len(leftovers) != 0 {
		t.Fatalf("temporary files left: %q", leftovers)
	}
}

func TestLoadIdentityNoState(t *testing.T) {
	t.Parallel()
	a, err1 := LoadIdentity("", "n0")
	b, err2 := LoadIdentity("", "n0")
	if err1 != nil || err2 != nil || !execid.ValidEpoch(a) || a == b {
		t.Fatalf("LoadIdentity without state = %q, %v; %q, %v: want two fresh epochs", a, err1, b, err2)
	}
}

// TestLoadIdentityRefuses: a malformed node.json is an error and stays as
// it is: the epoch it held may name live executions.
func TestLoadIdentityRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, content, want string }{
		{"not json", "{", "node identity"},
		{"bad epoch", `{"node":"n0","epoch":"ABCDEF"}`, "malformed"},
		{"bad node", `{"node":"N0","epoch":"abcdef"}`, "malformed"},
		{"empty", ``, "node identity"},
		{"huge", `{"node":"n0","epoch":"abcdef","x":"` + strings.Repeat("x", 5000) + `"}`, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, IdentityFile)
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadIdentity(dir, "n0"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadIdentity = %v, want %q", err, tc.want)
			}
			if b, _ := os.ReadFile(path); string(b) != tc.content {
				t.Fatalf("node.json changed to %q", b)
			}
		})
	}
	// A node.json that is a symbolic link is not read through.
	dir, elsewhere := t.TempDir(), filepath.Join(t.TempDir(), "node.json")
	os.WriteFile(elsewhere, []byte(`{"node":"n0","epoch":"abcdef"}`), 0o600)
	os.Symlink(elsewhere, filepath.Join(dir, IdentityFile))
	if epoch, err := LoadIdentity(dir, "n0"); err == nil {
		t.Fatalf("LoadIdentity read epoch %q through a symbolic link", epoch)
	}
	if _, err := LoadIdentity(t.TempDir(), "Bad"); err == nil {
		t.Fatal("LoadIdentity accepted a bad node name")
	}
	if _, err := LoadIdentity(filepath.Join(t.TempDir(), "missing"), "n0"); err == nil {
		t.Fatal("LoadIdentity in a missing directory")
	}
}

// TestLoadIdentityRace: starts racing on one new directory agree on one
// epoch.
func TestLoadIdentityRace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var wg sync.WaitGroup
	epochs := make([]string, 8)
	for i := range epochs {
		wg.Go(func() {
			e, err := LoadIdentity(dir, "n0")
			if err != nil {
				t.Error(err)
			}
			epochs[i] = e
		})
	}
	wg.Wait()
	for _, e := range epochs {
		if e != epochs[0] {
			t.Fatalf("racing starts got epochs %q", epochs)
		}
	}
}
