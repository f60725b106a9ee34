package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// The container matrix (docs/operations.md, "Where termgate runs"): Podman
// from Debian's packages runs this test binary as termgate inside
// containers whose root filesystem is the host's own, under an overlay
// (no image registry is reachable), each cell with the settings termgate
// manifest prints or one fewer, and checks what verify reports and what a
// sandbox enforces there.

// podmanConf is the containers.conf of the matrix: runc, since crun
// refuses a host with hybrid cgroups, and no default ulimits, which a
// root without CAP_SYS_RESOURCE (this kind of machine) cannot raise.
const podmanConf = `[containers]
default_ulimits = []
[engine]
runtime = "runc"
`

// containerCaps are the capabilities the matrix grants: what the launcher
// needs as root, and what network policies need.
func containerCaps() string {
	return strings.Join(append(sandbox.RootCapabilities(), sandbox.NetworkPolicyCapabilities()...), ",")
}

// podman is one container run of the matrix.
type podman struct {
	t       *testing.T
	conf    string   // CONTAINERS_CONF
	bin     string   // this test binary, bound read-only at /mnt (a directory the root has: a user-namespaced container cannot make one in the host's)
	seccomp string   // termgate manifest seccomp's profile
	setuid  string   // a directory for a setuid-root bwrap
	entry   []string // run before termgate, which it is given as its arguments
}

func newPodman(t *testing.T) *podman {
	t.Helper()
	sandboxtest.NeedRoot(t)
	if _, err := exec.LookPath("podman"); err != nil {
		sandboxtest.Unavailable(t, "podman not installed (Debian: apt-get install podman runc)")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		sandboxtest.Unavailable(t, "runc not installed (Debian: apt-get install runc)")
	}
	needBwrap(t)
	dir := sandboxtest.Dir(t)
	p := &podman{t: t, conf: filepath.Join(dir, "containers.conf"), seccomp: filepath.Join(dir, "seccomp.json")}
	if err := os.WriteFile(p.conf, []byte(podmanConf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.seccomp, sandbox.ContainerSeccompProfile(), 0o644); err != nil {
		t.Fatal(err)
	}
	// The binary lives out of /tmp, which a user-namespaced container
	// covers with a tmpfs of its own.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p.bin, p.setuid = filepath.Join(dir, "bin"), filepath.Join(dir, "setuid")
	if err := errors.Join(os.Mkdir(p.bin, 0o755), os.Mkdir(p.setuid, 0o755)); err != nil {
		t.Fatal(err)
	}
	if err := copyFileMode(self, filepath.Join(p.bin, "termgate"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// in is p for a subtest: its failures are t's.
func (p *podman) in(t *testing.T) *podman {
	q := *p
	q.t = t
	return &q
}

// run runs termgate args in a container with opts, and returns its exit
// status and output.
func (p *podman) run(opts []string, args ...string) (int, string, string) {
	p.t.Helper()
	enc, _ := json.Marshal(args)
	name := "termgate-matrix-" + randomHex()
	full := append([]string{"run", "--rm", "--name", name, "--network", "none", "--rootfs",
		"-v", p.bin + ":/mnt:ro", "--env", cliInTerminalEnv + "=" + string(enc)}, opts...)
	// The root is the host's own, under an overlay the container writes.
	full = append(full, "/:O")
	full = append(full, p.entry...)
	full = append(full, "/mnt/termgate", "-test.run=^TestContainerMatrix$")
	cmd := exec.Command("podman", full...)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+p.conf)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		// Stuck: its goroutines, then its end.
		p.podman("kill", "--signal", "QUIT", name)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			p.podman("kill", name)
			<-done
		}
		p.t.Fatalf("podman %q: no end after 3 minutes: %s %s", full, out.String(), errb.String())
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// podman runs a podman command that needs no container of its own.
func (p *podman) podman(args ...string) {
	cmd := exec.Command("podman", args...)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+p.conf)
	if out, err := cmd.CombinedOutput(); err != nil {
		p.t.Logf("podman %q: %v: %s", args, err, out)
	}
}

func randomHex() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// rootful are the options of a rootful container with termgate's least
// privilege: the capabilities, the profile, no new privileges, the
// host's cgroups writable and two loop devices for workspace quotas.
func (p *podman) rootful() []string {
	return append(p.confined(), "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
		"--device", "/dev/loop-control", "--device", "/dev/loop0", "--device", "/dev/loop1")
}

// confined are the capabilities, the profile and no new privileges
// alone: the runtime's read-only cgroups, no loop devices.
func (p *podman) confined() []string {
	return []string{"--cap-drop", "ALL", "--cap-add", containerCaps(),
		"--security-opt", "seccomp=" + p.seccomp, "--security-opt", "no-new-privileges"}
}

// verifyIn runs verify --json in a container and decodes it.
func (p *podman) verifyIn(opts []string, flags ...string) (verifyReport, int, string) {
	p.t.Helper()
	code, out, stderr := p.run(opts, append([]string{"verify", "--json"}, flags...)...)
	var r verifyReport
	if code != 0 && !strings.HasPrefix(strings.TrimSpace(out), "{") {
		return r, code, stderr
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		p.t.Fatalf("verify --json: %v: %q (stderr %q)", err, out, stderr)
	}
	return r, code, stderr
}

// checkGuarantees compares each guarantee's state with want (a name
// missing from want must be held).
func checkGuarantees(t *testing.T, cell string, r verifyReport, want map[string]string) {
	t.Helper()
	seen := map[string]bool{}
	for _, g := range r.Guarantees {
		seen[g.Name] = true
		w := want[g.Name]
		if w == "" {
			w = sandbox.Held
		}
		if g.State != w {
			t.Errorf("%s: %s is %s (%s), want %s", cell, g.Name, g.State, g.Detail, w)
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("%s: no guarantee %s in %+v", cell, name, r.Guarantees)
		}
	}
	if len(r.Guarantees) == 0 {
		t.Errorf("%s: no guarantees reported", cell)
	}
}

// inContainer is what a process in a private network namespace lacks:
// the kernel's process events reach only the host's.
var inContainer = map[string]string{"exact_exit_status": sandbox.Missing}

func TestContainerMatrix(t *testing.T) {
	runCLIFromEnv()
	t.Parallel()
	p := newPodman(t)
	t.Run("rootful least privilege", func(t *testing.T) {
		t.Parallel()
		p := p.in(t)
		r, code, stderr := p.verifyIn(p.rootful())
		if code != 0 || !r.OK || r.Mode != "userns" {
			t.Fatalf("verify: status %d, ok %v, mode %q, problems %q, stderr %q", code, r.OK, r.Mode, r.Problems, stderr)
		}
		checkGuarantees(t, "rootful", r, inContainer)
		// The ceilings hold, not only their controllers: a fork bomb and
		// a memory hog end on theirs.
		code, out, stderr := p.run(p.rootful(), "exec", "--pids", "24", "--", "/bin/sh", "-c",
			"i=0; while [ $i -lt 100 ]; do sleep 30 & i=$((i+1)); done; wait")
		if code == 0 || !strings.Contains(stderr, "pids ceiling") {
			t.Errorf("fork bomb under --pids 24: status %d, %q %q", code, out, stderr)
		}
		code, out, stderr = p.run(p.rootful(), "exec", "--memory", "48M", "--", "/bin/sh", "-c", "head -c 400M /dev/zero | tail")
		if code == 0 || !strings.Contains(stderr, "memory ceiling") {
			t.Errorf("memory hog under --memory 48M: status %d, %q %q", code, out, stderr)
		}
	})
	t.Run("rootful without KILL", func(t *testing.T) {
		t.Parallel()
		p := p.in(t)
		opts := p.rootful()
		opts[3] = strings.Replace(opts[3], ",KILL", "", 1)
		code, _, stderr := p.run(opts, "verify")
		if code == 0 || !strings.Contains(stderr, "without the capabilities KILL (signal sandboxes") {
			t.Errorf("verify without KILL: status %d, stderr %q, want a refusal naming KILL", code, stderr)
		}
	})
	t.Run("rootful setuid bwrap", func(t *testing.T) {
		t.Parallel()
		p := p.in(t)
		// The seed's launcher identity: root in a container running a
		// setuid-root bwrap, which no-new-privileges would disarm.
		if err := copyFileMode("/usr/bin/bwrap", filepath.Join(p.setuid, "bwrap"), os.ModeSetuid|0o755); err != nil {
			t.Fatal(err)
		}
		opts := append(p.confined()[:6], "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
			"-v", p.setuid+":/opt:ro,suid", "--env", "TERMGATE_BWRAP=/opt/bwrap")
		r, code, stderr := p.verifyIn(opts)
		if code != 0 || !r.OK || r.Mode != "setuid" {
			t.Fatalf("verify: status %d, ok %v, mode %q, problems %q, stderr %q", code, r.OK, r.Mode, r.Problems, stderr)
		}
		checkGuarantees(t, "setuid bwrap", r, map[string]string{"exact_exit_status": sandbox.Missing, "workspace_quota": sandbox.Missing})
		code, out, stderr := p.run(opts, "exec", "--pids", "24", "--", "/bin/sh", "-c", "id -u; i=0; while [ $i -lt 100 ]; do sleep 30 & i=$((i+1)); done; wait")
		if code == 0 || !strings.HasPrefix(out, "2000000\n") || !strings.Contains(stderr, "pids ceiling") {
			t.Errorf("fork bomb as the host identity under --pids 24: status %d, %q %q", code, out, stderr)
		}
	})
	t.Run("kubernetes setup", func(t *testing.T) {
		t.Parallel()
		p := p.in(t)
		// The manifest's container command, before serve, in a container
		// as unprivileged as the manifest's: the runtime's read-only
		// cgroups are remounted for the ceilings.
		script := kubePod(t).Spec.Containers[0].Command[2]
		k := p.in(t)
		k.entry = []string{"/bin/sh", "-c", strings.Replace(script, `exec termgate "$@"`, `exec "$@"`, 1), "termgate"}
		r, code, stderr := k.verifyIn(p.confined())
		if code != 0 || !r.OK {
			t.Fatalf("verify: status %d, ok %v, problems %q, stderr %q", code, r.OK, r.Problems, stderr)
		}
		checkGuarantees(t, "kubernetes setup", r, map[string]string{"exact_exit_status": sandbox.Missing, "workspace_quota": sandbox.Missing})
		if strings.Contains(stderr, "stays") {
			t.Errorf("the setup left something read-only: %s", stderr)
		}
	})
	t.Run("rootful read-only cgroups", func(t *testing.T) {
		t.Parallel()
		p := p.in(t)
		opts := p.confined()
		r, code, stderr := p.verifyIn(opts, "--pids-fallback", "rlimit")
		if code != 0 || !r.OK {
			t.Fatalf("verify: status %d, ok %v, problems %q, stderr %q", code, r.OK, r.Problems, stderr)
		}
		checkGuarantees(t, "read-only cgroups", r, map[string]string{"exact_exit_status": sandbox.Missing,
			"pids_ceiling": sandbox.Degraded, "memory_ceiling": sandbox.Missing, "cpu_weight": sandbox.Missing,
			"tenant_cgroups": sandbox.Missing, "workspace_quota": sandbox.Missing})
		// Without the flag the ceiling is refused before anything runs;
		// with it, the fork bomb is.
		code, out, stderr := p.run(opts, "exec", "--pids", "24", "--", "/bin/echo", "ran")
		if code == 0 || out != "" || !strings.Contains(stderr, "pids") {
			t.Errorf("exec --pids 24 without a pids controller or --pids-fallback: status %d, %q %q, want it refused", code, out, stderr)
		}
		code, out, stderr = p.run(append(opts, "--env", "TERMGATE_PIDS_FALLBACK=rlimit"), "exec", "--pids", "24", "--", "/bin/sh", "-c",
			"bash -c 'ulimit -u'; i=0; while [ $i -lt 100 ]; do sleep 30 & i=$((i+1)); done; echo all started")
		if code == 0 || !strings.HasPrefix(out, "24\n") || strings.Contains(out, "all started") {
			t.Errorf("fork bomb under --pids 24 with --pids-fallback rlimit: status %d, %q %q", code, out, stderr)
		}
	})
	t.Run("rootless", func(t *testing.T) {
		t.Parallel()
		p := p.in(t)
		// Podman as a user: the container's root is that user, the host's
		// cgroups and loop devices are not its own.
		opts := append(p.confined(), "--tmpfs", "/run:rw,notmpcopyup", "--tmpfs", "/tmp:rw,notmpcopyup,mode=1777")
		code, out, stderr := p.rootless(opts, "verify", "--json", "--pids-fallback", "rlimit")
		var r verifyReport
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 || !r.OK {
			t.Fatalf("verify: status %d, %v, %q, stderr %q", code, err, out, stderr)
		}
		checkGuarantees(t, "rootless", r, map[string]string{"exact_exit_status": sandbox.Missing,
			"pids_ceiling": sandbox.Degraded, "memory_ceiling": sandbox.Missing, "cpu_weight": sandbox.Missing,
			"tenant_cgroups": sandbox.Missing, "workspace_quota": sandbox.Missing})
		code, out, stderr = p.rootless(opts, "exec", "--pids-fallback", "rlimit", "--pids", "24", "--", "/bin/sh", "-c",
			"bash -c 'ulimit -u'; i=0; while [ $i -lt 100 ]; do sleep 30 & i=$((i+1)); done; echo all started")
		if code == 0 || !strings.HasPrefix(out, "24\n") || strings.Contains(out, "all started") {
			t.Errorf("fork bomb under --pids 24 with --pids-fallback rlimit: status %d, %q %q", code, out, stderr)
		}
	})
	t.Run("user namespace", func(t *testing.T) {
		t.Parallel()
		p := p.in(t)
		// A container in a user namespace of its own, as a Kubernetes pod
		// with hostUsers: false: the host's cgroups are not its to write.
		opts := append(p.confined(), "--uidmap", "0:1000000:4000000", "--gidmap", "0:1000000:4000000",
			"--tmpfs", "/run:rw,notmpcopyup", "--tmpfs", "/tmp:rw,notmpcopyup,mode=1777")
		r, code, stderr := p.verifyIn(opts, "--pids-fallback", "rlimit")
		if code != 0 || !r.OK {
			t.Fatalf("verify: status %d, ok %v, problems %q, stderr %q", code, r.OK, r.Problems, stderr)
		}
		checkGuarantees(t, "user namespace", r, map[string]string{"exact_exit_status": sandbox.Missing,
			"pids_ceiling": sandbox.Degraded, "memory_ceiling": sandbox.Missing, "cpu_weight": sandbox.Missing,
			"tenant_cgroups": sandbox.Missing, "workspace_quota": sandbox.Missing})
		// The device nodes are the host's, not the runtime's placeholders.
		code, out, stderr := p.run(opts, "exec", "--", "/bin/sh", "-c", "head -c 5 /dev/zero | od -An -tx1; head -c 16 /dev/urandom | wc -c")
		if code != 0 || out != " 00 00 00 00 00\n16\n" {
			t.Errorf("/dev/zero and /dev/urandom in a user-namespaced container: status %d, %q %q", code, out, stderr)
		}
	})
}

// rootlessUser is the account the rootless cell runs Podman as, with
// subordinate ids covering the sandbox's and tenants' (.ci/deps makes it).
const rootlessUser = "termgate-rootless"

// rootless runs termgate args in a rootless container of rootlessUser.
func (p *podman) rootless(opts []string, args ...string) (int, string, string) {
	p.t.Helper()
	if err := exec.Command("id", rootlessUser).Run(); err != nil {
		sandboxtest.Unavailable(p.t, "no user %s for rootless Podman (.ci/deps test makes it, with subordinate ids 10000000:4000000)", rootlessUser)
	}
	if _, err := exec.LookPath("fuse-overlayfs"); err != nil {
		sandboxtest.Unavailable(p.t, "fuse-overlayfs not installed (Debian: apt-get install fuse-overlayfs)")
	}
	// Its own store, under an overlay through FUSE (the kernel's refuses
	// the host's root as a lower layer in a user namespace).
	store := filepath.Join(sandboxtest.Dir(p.t), "store")
	conf := filepath.Join(filepath.Dir(store), "storage.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("[storage]\ndriver = \"overlay\"\ngraphroot = %q\nrunroot = %q\n[storage.options.overlay]\nmount_program = \"/usr/bin/fuse-overlayfs\"\n",
		filepath.Join(store, "graph"), filepath.Join(store, "run"))), 0o644)
	if out, err := exec.Command("install", "-d", "-o", rootlessUser, store, filepath.Join(store, "xdg")).CombinedOutput(); err != nil {
		p.t.Fatalf("make the store: %v: %s", err, out)
	}
	p.t.Cleanup(func() { exec.Command("pkill", "-u", rootlessUser).Run() }) // Podman's pause process
	enc, _ := json.Marshal(args)
	ctx, cancel := context.WithTimeout(p.t.Context(), 4*time.Minute)
	defer cancel()
	full := append([]string{"-u", rootlessUser, "--", "podman", "run", "--rm", "--network", "none", "--rootfs",
		"-v", p.bin + ":/mnt:ro", "--env", cliInTerminalEnv + "=" + string(enc)}, opts...)
	full = append(full, "/:O", "/mnt/termgate", "-test.run=^TestContainerMatrix$")
	cmd := exec.CommandContext(ctx, "runuser", full...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + store, "CONTAINERS_CONF=" + p.conf,
		"CONTAINERS_STORAGE_CONF=" + conf, "XDG_RUNTIME_DIR=" + filepath.Join(store, "xdg")}
	cmd.WaitDelay = 10 * time.Second
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		p.t.Fatalf("runuser %q: %v: %s", full, err, errb.String())
	}
	return code, out.String(), errb.String()
}

// copyFileMode copies src to a new file dst of mode perm.
func copyFileMode(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
