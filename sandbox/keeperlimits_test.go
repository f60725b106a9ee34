//go:build linux

package sandbox

import (
	"crypto/md5"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// largestPolicy is a valid policy at every bound that costs the keeper
// something: the most arguments in the most bytes (with bytes that JSON
// would escape or replace), the most binds, host networking (one more
// data file), pipes (more held descriptors than a PTY), the largest
// environment. The command prints a digest of its arguments.
func largestPolicy(t testing.TB) (Policy, string) {
	script := `printf '%s\0' "$@" | md5sum`
	cmd := []string{"sh", "-c", script, "sh"}
	used := 0
	for _, a := range cmd {
		used += len(a) + 1
	}
	n := maxArgs - len(cmd)
	size := (maxArgBytes-used)/n - 1
	var args []string
	for i := range n {
		a := fmt.Sprintf("%05d<>&\"\\\x01\x7f\xff\xc3", i)
		args = append(args, a+strings.Repeat("\u2028", (size-len(a))/3)+strings.Repeat("x", (size-len(a))%3))
	}
	sum := md5.Sum([]byte(strings.Join(args, "\x00") + "\x00"))
	env := map[string]string{"PATH": DefaultPath}
	for i := range maxEnvVars - 1 {
		env[fmt.Sprintf("V%03d", i)] = strings.Repeat("v", maxEnvBytes/maxEnvVars-len("V000")-2)
	}
	p := Policy{Command: append(cmd, args...), Env: env, Workspace: sandboxtest.Dir(t), Network: NetworkHost, Proc: ProcPrivate}
	for i := range maxBinds {
		p.Binds = append(p.Binds, Bind{Source: "/usr/share", Dest: fmt.Sprintf("/b/%d", i)})
	}
	if err := p.Normalize().Validate(); err != nil {
		t.Fatalf("the largest policy is not valid: %v", err)
	}
	return p, fmt.Sprintf("%x  -\n", sum)
}

// TestKeeperSpawnsLargestPolicy: the keeper's limits hold the largest
// valid policy, whose arguments reach the command byte for byte.
func TestKeeperSpawnsLargestPolicy(t *testing.T) {
	t.Parallel()
	l := keeperLauncher(t, keeperDir(t))
	p, want := largestPolicy(t)
	p.Key = "largest"
	if n := firstFileFD + len(buildPlan(p.Normalize(), l.layout, nil).files); n > maxSpawnFiles {
		t.Errorf("the largest policy gives bwrap %d descriptors, more than maxSpawnFiles (%d)", n, maxSpawnFiles)
	}
	var out, errb sandboxtest.SyncBuffer
	proc, err := l.Start(t.Context(), p, Stdio{Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("start the largest policy through the keeper: %v", err)
	}
	exit, ok := waitReleased(proc, 60*time.Second)
	if !ok || exit.Code != 0 || out.String() != want {
		t.Errorf("exit %s (done %v), stdout %q, want %q; stderr %q", exit, ok, out.String(), want, errb.String())
	}
}

// TestLargestPolicyWithoutKeeper: the same policy forked by the launcher
// itself, so that the two paths agree.
func TestLargestPolicyWithoutKeeper(t *testing.T) {
	t.Parallel()
	l := needLauncher(t)
	p, want := largestPolicy(t)
	var out, errb sandboxtest.SyncBuffer
	proc, err := l.Start(t.Context(), p, Stdio{Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	exit, ok := waitDone(proc, 60*time.Second)
	if !ok || exit.Code != 0 || out.String() != want {
		t.Errorf("exit %s (done %v), stdout %q, want %q; stderr %q", exit, ok, out.String(), want, errb.String())
	}
}
