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

// TestSandboxMountinfoHidesTheBinaryPath: a sandbox's mountinfo does not
// show where termgate is installed on the host, though its init
// (/run/termgate/init) is that binary: termgate runs from a directory the
// sandbox identity can search, as an installed binary does, and a real
// sandbox reads /proc/self/mountinfo.
func TestSandboxMountinfoHidesTheBinaryPath(t *testing.T) {
	serveFromEnv()
	t.Parallel()
	needBwrap(t)
	if os.Geteuid() != 0 {
		sandboxtest.Unavailable(t, "installing the binary where the sandbox identity can run it needs root")
	}
	dir, err := os.MkdirTemp("", "tg-installed-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "termgate-under-test")
	copyFile(t, "/proc/self/exe", bin)
	enc, _ := json.Marshal([]string{"exec", "--proc", "private", "--", "cat", "/proc/self/mountinfo"})
	cmd := exec.Command(bin, "-test.run=^"+t.Name()+"$")
	cmd.Env = append(os.Environ(), serveInChildEnv+"="+string(enc))
	cmd.WaitDelay = time.Minute
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("termgate exec: %v: %s", err, out)
	}
	info := string(out)
	if !strings.Contains(info, " /run/termgate/init ") {
		t.Fatalf("no mount of the init in the sandbox's mountinfo:\n%s", info)
	}
	if strings.Contains(info, filepath.Base(dir)) {
		t.Errorf("the sandbox's mountinfo shows the binary's host path %s:\n%s", bin, info)
	}
}
