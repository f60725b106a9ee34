package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// nobodyUID owns the state directories a local user planted in the tests.
const nobodyUID = 65534

// TestServeRefusesAPlantedStateDir: a state directory that another user
// made first, one that is a symbolic link, one in a parent others may
// write, and a keeper.log that is a symbolic link are refused by a real
// serve at once, with the reason, before anything is written there: the
// link's target is never created, the linked directory never written.
func TestServeRefusesAPlantedStateDir(t *testing.T) {
	serveFromEnv()
	t.Parallel()
	if os.Geteuid() != 0 {
		sandboxtest.Unavailable(t, "planting another user's state directory needs root")
	}
	for _, c := range []struct {
		name  string
		plant func(t *testing.T, state, target string) (state2 string)
		want  string
	}{
		{"another user's", func(t *testing.T, state, target string) string {
			mkdir(t, state, 0o700)
			symlink(t, target, filepath.Join(state, "keeper.log"))
			lchown(t, filepath.Join(state, "keeper.log"), nobodyUID)
			lchown(t, state, nobodyUID)
			return state
		}, "is owned by uid 65534"},
		{"a symbolic link", func(t *testing.T, state, target string) string {
			elsewhere := filepath.Join(filepath.Dir(state), "elsewhere")
			mkdir(t, elsewhere, 0o700)
			symlink(t, elsewhere, state)
			return elsewhere
		}, "is a symbolic link"},
		{"mode 0755, not empty", func(t *testing.T, state, target string) string {
			mkdir(t, state, 0o755)
			if err := os.WriteFile(filepath.Join(state, "planted"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return state
		}, "had mode 0755 and holds entries"},
		{"in a parent others may write", func(t *testing.T, state, target string) string {
			if err := os.Chmod(filepath.Dir(state), 0o777); err != nil {
				t.Fatal(err)
			}
			return state
		}, "writable by others"},
		{"ours, with keeper.log a link", func(t *testing.T, state, target string) string {
			mkdir(t, state, 0o700)
			symlink(t, target, filepath.Join(state, "keeper.log"))
			return state
		}, "keeper.log"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			n := newDurableNode(t)
			target := filepath.Join(t.TempDir(), "TARGET")
			written := c.plant(t, n.state, target)
			logs := n.startRefused(t)
			if !strings.Contains(logs, c.want) || !strings.Contains(logs, "--state-dir") {
				t.Errorf("serve's refusal does not say %q about --state-dir:\n%s", c.want, logs)
			}
			if _, err := os.Lstat(target); err == nil {
				t.Errorf("root created the link's target %s", target)
			}
			if _, err := os.Lstat(filepath.Join(written, "keeper.log")); err == nil && written != n.state {
				t.Errorf("serve wrote keeper.log into %s, the link's target", written)
			}
		})
	}
}

// startRefused runs serve on n, which must end without listening, and
// returns its log.
func (n *durableNode) startRefused(t *testing.T) string {
	t.Helper()
	enc, _ := json.Marshal(n.args)
	cmd := exec.Command(n.exe, "-test.run=^"+t.Name()+"$")
	cmd.Env = append(os.Environ(), serveInChildEnv+"="+string(enc))
	logs := &sandboxtest.SyncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	began := time.Now()
	var err error
	ended := sandboxtest.Eventually(t, 120*time.Second, func() bool {
		select {
		case err = <-done:
			return true
		default:
			return strings.Contains(logs.String(), `"msg":"listening"`)
		}
	})
	if !ended || err == nil {
		cmd.Process.Kill()
		<-done
		t.Fatalf("serve started instead of refusing (%v):\n%s", err, logs.String())
	}
	t.Logf("serve refused after %v: %v", time.Since(began).Round(time.Millisecond), err)
	return logs.String()
}

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func lchown(t *testing.T, name string, uid int) {
	t.Helper()
	if err := os.Lchown(name, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// TestDefaultStateDir: the default is never in a world-writable parent
// such as /dev/shm: /run/termgate for root whatever /run is, the runtime
// directory for a user, and none (an error naming --state-dir) for a user
// without one.
func TestDefaultStateDir(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		euid       int
		runtimeDir string
		want       string
	}{
		{0, "", "/run/termgate"},
		{0, "/run/user/0", "/run/termgate"},
		{1000, "/run/user/1000", "/run/user/1000/termgate"},
		{1000, "", ""},
	} {
		got, err := defaultStateDir(c.euid, c.runtimeDir)
		if got != c.want || (c.want == "") != (err != nil) {
			t.Errorf("defaultStateDir(%d, %q) = %q, %v; want %q", c.euid, c.runtimeDir, got, err, c.want)
		}
		if err != nil && !strings.Contains(err.Error(), "--state-dir") {
			t.Errorf("defaultStateDir(%d, %q): %v does not name --state-dir", c.euid, c.runtimeDir, err)
		}
	}
}

// TestServeRefusesAQuotaMkfsRefuses: a --workspace-quota too small for the
// inodes asked (64M with the default 1M inodes) is refused by a real serve
// at its start, naming both flags, rather than failing every tenant's
// first start with unenforceable.
func TestServeRefusesAQuotaMkfsRefuses(t *testing.T) {
	serveFromEnv()
	t.Parallel()
	if os.Geteuid() != 0 {
		sandboxtest.Unavailable(t, "workspace quotas need root")
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		sandboxtest.Unavailable(t, "workspace quotas need mkfs.ext4")
	}
	n := newDurableNode(t, "--workspace-quota", "64M")
	logs := n.startRefused(t)
	for _, want := range []string{"--workspace-quota 64M", "--workspace-inodes 1048576", "inode"} {
		if !strings.Contains(logs, want) {
			t.Errorf("serve's refusal does not say %q:\n%s", want, logs)
		}
	}
}
