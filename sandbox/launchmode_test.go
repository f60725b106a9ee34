//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/termgate/termgate/sandbox/internal/fsid"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// envNoUserns names the bwrap a test role runs with user namespaces
// switched off (see runNoUsernsRole).
const envNoUserns = "TERMGATE_TEST_NOUSERNS_BWRAP"

// TestWithoutUserNamespaces runs a launcher where the kernel gives no
// user namespace: in a user namespace of the test's own (every host id
// mapped to itself, so root stays root for files and setuid) whose
// user.max_user_namespaces is 0, the per-namespace setting, never the
// host's (and a mount namespace it owns, which the launcher's forking
// threads can enter and leave). A plain bwrap is refused with the reason and the fix; a setuid
// root one runs sandboxes that pass every probe check, as the host
// identity, with sized tmpfs mounts.
func TestWithoutUserNamespaces(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	bwrap, err := exec.LookPath("bwrap")
	sandboxtest.Need(t, "bwrap (install bubblewrap to run this test)", err)
	dir := sandboxtest.Dir(t)
	os.Chmod(dir, 0o755)
	setuid := filepath.Join(dir, "bwrap")
	if err := copyFile(bwrap, setuid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(setuid, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}

	plain := noUsernsRun(t, bwrap)
	if !strings.Contains(plain, "err=") || !strings.Contains(plain, "user.max_user_namespaces = 0") || !strings.Contains(plain, "chmod u+s") {
		t.Errorf("plain bwrap without user namespaces: %q, want a refusal naming the setting and the setuid fix", plain)
	}
	// Where user namespaces work, a setuid bwrap still refuses --size:
	// it is used the setuid way.
	l := cgroupTestLauncher(t, Config{Bwrap: setuid})
	if r, err := l.Probe(t.Context()); err != nil || r.Mode != "setuid" {
		t.Errorf("setuid bwrap with user namespaces: mode %q, %v", r.Mode, err)
	}
	got := noUsernsRun(t, setuid)
	for _, want := range []string{"mode=setuid\n", "ok=true\n", "uid=2000000\n", "tmp=67108864\n", "caps=0000000000000000\n", "isolation=held\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("setuid bwrap without user namespaces: %q, want %q in it", got, want)
		}
	}
}

// noUsernsRun runs runNoUsernsRole with bwrap in a fresh user namespace.
func noUsernsRun(t *testing.T, bwrap string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envNoUserns+"="+bwrap)
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 4000000}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS, UidMappings: ids, GidMappings: ids, GidMappingsEnableSetgroups: true, Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("role: %v: %s", err, out.String())
	}
	return out.String()
}

// runNoUsernsRole is the test binary in the namespace noUsernsRun made:
// it switches user namespaces off there, then prints what a launcher
// over the named bwrap says and does.
func runNoUsernsRole() bool {
	bwrap := os.Getenv(envNoUserns)
	if bwrap == "" {
		return false
	}
	if err := os.WriteFile(maxUserNamespaces, []byte("0"), 0); err != nil {
		fmt.Println("role: switch user namespaces off:", err)
		os.Exit(1)
	}
	l, err := NewLauncher(Config{Bwrap: bwrap, CgroupRoot: os.TempDir() + "/no-cgroups"})
	if err != nil {
		fmt.Printf("err=%v\n", err)
		return true
	}
	defer l.Close()
	r, err := l.Probe(context.Background())
	fmt.Printf("mode=%s\nok=%v\nprobe=%v\n", r.Mode, r.OK, err)
	for _, g := range r.Guarantees {
		fmt.Printf("%s=%s\n", g.Name, g.State)
	}
	ws, _ := os.MkdirTemp("", "termgate-nouserns-")
	defer os.RemoveAll(ws)
	var out bytes.Buffer
	p, err := l.Start(context.Background(), Policy{Workspace: ws, TmpSize: 64 << 20, Proc: ProcPrivate, Timeout: 30 * time.Second,
		Command: sh(`echo uid=$(id -u); echo tmp=$(( $(stat -f -c %b /tmp) * $(stat -f -c %S /tmp) )); grep CapEff /proc/self/status | tr -d ' \t' | tr A-Z a-z | sed 's/capeff:/caps=/'`)}, Stdio{Stdout: &out, Stderr: &out})
	if err != nil {
		fmt.Println("start:", err)
		return true
	}
	fmt.Println(p.Wait())
	io.Copy(os.Stdout, &out)
	return true
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// TestRootWithoutCapabilities: root without capabilities a launcher
// needs (a container's root, here dropped from the bounding set by
// setpriv) is refused at once, each missing one named with its use,
// rather than failing at a first start or leaving a sandbox it cannot
// signal.
func TestRootWithoutCapabilities(t *testing.T) {
	if os.Getenv("TERMGATE_TEST_CAPS_ROLE") != "" {
		_, err := NewLauncher(Config{})
		fmt.Printf("err=%v\n", err)
		return
	}
	t.Parallel()
	sandboxtest.NeedRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	sandboxtest.Need(t, "setpriv (util-linux)", err)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, setpriv, "--bounding-set", "-kill,-fowner", os.Args[0], "-test.run=^TestRootWithoutCapabilities$")
	cmd.Env = append(os.Environ(), "TERMGATE_TEST_CAPS_ROLE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("role: %v: %s", err, out)
	}
	for _, want := range []string{"err=sandbox: unavailable on this host: running as root without the capabilities", "FOWNER (", "KILL (signal sandboxes"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("root without KILL and FOWNER: %s, want %q in it", out, want)
		}
	}
	if strings.Contains(string(out), "CHOWN (") {
		t.Errorf("root with CHOWN: %s, want it not named", out)
	}
}

func TestNamespaceHint(t *testing.T) {
	t.Parallel()
	for msg, hinted := range map[string]bool{
		"probe command sandbox setup failed: bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces": true,
		"bwrap: Creating new namespace failed: Operation not permitted":     true,
		"bwrap: Can't mount proc on /newroot/proc: Operation not permitted": false,
	} {
		got := withNamespaceHint(errors.New(msg)).Error()
		if strings.Contains(got, "termgate manifest seccomp") != hinted {
			t.Errorf("%q: %q, want a hint %v", msg, got, hinted)
		}
	}
}

// TestSetuidBwrapUnderNoNewPrivs: under no-new-privileges an exec grants
// no set-user-id privilege, so a setuid bwrap is used as a plain one.
func TestSetuidBwrapUnderNoNewPrivs(t *testing.T) {
	if bwrap := os.Getenv("TERMGATE_TEST_MODE_ROLE"); bwrap != "" {
		l, err := NewLauncher(Config{Bwrap: bwrap, CgroupRoot: os.TempDir() + "/no-cgroups"})
		if err != nil {
			fmt.Printf("err=%v\n", err)
			return
		}
		defer l.Close()
		r, err := l.Probe(context.Background())
		fmt.Printf("mode=%s\nerr=%v\n", r.Mode, err)
		return
	}
	t.Parallel()
	sandboxtest.NeedRoot(t)
	bwrap, err := exec.LookPath("bwrap")
	sandboxtest.Need(t, "bwrap (install bubblewrap to run this test)", err)
	setpriv, err := exec.LookPath("setpriv")
	sandboxtest.Need(t, "setpriv (util-linux)", err)
	dir := sandboxtest.Dir(t)
	setuid := filepath.Join(dir, "bwrap")
	if err := copyFile(bwrap, setuid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(setuid, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, setpriv, "--no-new-privs", os.Args[0], "-test.run=^TestSetuidBwrapUnderNoNewPrivs$")
	cmd.Env = append(os.Environ(), "TERMGATE_TEST_MODE_ROLE="+setuid)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "mode=userns\nerr=<nil>\n") {
		t.Errorf("setuid bwrap under no-new-privs: %v: %s, want the userns mode and a passing probe", err, out)
	}
}

// TestRootCapabilitiesAreTheCallingThreads: the capability check reads
// the thread it runs on, not the thread group leader's /proc/self/status.
// A file operation elsewhere in the process (fsid) holds a thread at
// another filesystem uid, which clears CHOWN, DAC_OVERRIDE and FOWNER
// from that thread alone; when that thread was the leader, serve and
// verify started beside a file operation were refused as root without
// them.
func TestRootCapabilitiesAreTheCallingThreads(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t)
	if err := checkRootCaps(); err != nil {
		t.Skipf("this root lacks capabilities already: %v", err)
	}
	// fsid.Run is what file operations use: a thread of its own at
	// fsuid 1000 that goes back to the runtime after. While it is
	// there, the check runs on that thread and on another one: one of
	// the two is not the leader, so reading the leader fails either.
	var elsewhere error
	err := fsid.Run(1000, 1000, func() error {
		other := make(chan error, 1)
		go func() { other <- checkRootCaps() }()
		elsewhere = <-other
		eff, err := effectiveCaps()
		switch {
		case err != nil:
			return err
		case eff&(1<<unix.CAP_CHOWN) != 0:
			return fmt.Errorf("a thread at fsuid 1000 reads CHOWN in its effective set (%x): the check reads another thread", eff)
		}
		return checkRootCaps() // names CHOWN for this thread
	})
	if err == nil || !strings.Contains(err.Error(), "CHOWN (") {
		t.Errorf("the check on a thread at fsuid 1000: %v, want CHOWN named", err)
	}
	if elsewhere != nil {
		t.Errorf("the check on another thread meanwhile: %v", elsewhere)
	}
}
