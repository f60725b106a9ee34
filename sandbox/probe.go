//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Report is what Probe found this host can enforce.
type Report struct {
	OK          bool            `json:"ok"`
	Bwrap       string          `json:"bwrap"`
	Version     string          `json:"version"`
	Identity    string          `json:"identity"`
	Checks      map[string]bool `json:"checks"`
	Ceilings    map[string]bool `json:"ceilings"`
	Cgroups     CgroupInfo      `json:"cgroups"`
	ExactStatus bool            `json:"exact_exit_status"`
	TenantUIDs  string          `json:"tenant_uids,omitempty"` // the ids tenants get, as root
	// WorkspaceQuota names the mechanism of workspace quotas, or why there is none.
	WorkspaceQuota string `json:"workspace_quota"`
	// TenantCgroups says each tenant can have a cgroup of its own above its
	// executions' with memory, pids and CPU weight ceilings.
	TenantCgroups bool          `json:"tenant_cgroups"`
	StartLatency  time.Duration `json:"start_latency_ns"`
	// Mode is how bwrap makes the namespaces: "userns" (a user namespace
	// of its own, unprivileged) or "setuid" (a setuid-root bwrap, where
	// the host gives the sandbox identity no user namespace).
	Mode string `json:"mode"`
	// Guarantees lists each promise as held, degraded or missing.
	Guarantees []Guarantee `json:"guarantees"`
	Problems   []string    `json:"problems,omitempty"` // isolation is broken
	Warnings   []string    `json:"warnings,omitempty"` // isolation holds, reporting or tenant separation is degraded
}

// probeScript prints one fact per line from inside a sandbox.
const probeScript = `echo "uid=$(id -u)"
echo "host=$(hostname)"
grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status | tr -d ' \t' | tr ':' '='
echo "net=$(cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | tr '\n' ',')"
test -e /etc/shadow && echo shadow=visible || echo shadow=absent
(unshare -U true) 2>/dev/null && echo userns=allowed || echo userns=denied
touch /usr/probe 2>/dev/null && echo usr=writable || echo usr=readonly
touch /workspace/probe && echo workspace=writable
touch /dev/probe 2>/dev/null && echo dev=writable || echo dev=readonly
for d in null zero full random urandom tty; do test -c /dev/$d || echo "devnode=/dev/$d"; done
echo "pts=$(grep ' /dev/pts ' /proc/self/mountinfo | grep -o 'max=[0-9]*')"
(exec 3</proc/1/mem) 2>/dev/null && echo init_mem=open || echo init_mem=closed
` + probeSeccompScript

// probeSeccompScript prints the errno of socket(AF_VSOCK, SOCK_STREAM) and
// of io_uring_setup(1, NULL) (425 on every Linux architecture), 0 when the
// call succeeded. A shell cannot make either call, so it runs python3, or
// perl (essential on Debian) when python3 is missing; neither creates a
// ring: without the filter, the NULL parameters fail with EFAULT.
const probeSeccompScript = `if command -v python3 >/dev/null; then python3 -c '` + probeSeccompPython + `'
elif command -v perl >/dev/null; then perl -e '` + probeSeccompPerl + `'
else echo vsock=unprobed; echo io_uring=unprobed; fi
`

const probeSeccompPython = `
import ctypes, socket
try:
    socket.socket(40, socket.SOCK_STREAM).close(); print("vsock=0")
except OSError as e:
    print("vsock=%d" % e.errno)
libc = ctypes.CDLL(None, use_errno=True)
print("io_uring=%d" % (0 if libc.syscall(425, 1, None) >= 0 else ctypes.get_errno()))`

const probeSeccompPerl = `
print "vsock=", (socket(S, 40, 1, 0) ? 0 : $! + 0), "\n";
print "io_uring=", (syscall(425, 1, 0) >= 0 ? 0 : $! + 0), "\n";`

// Probe runs real commands in the sandbox and reports what the host
// enforces. The error is non-nil when the sandbox cannot run at all.
func (l *Launcher) Probe(ctx context.Context) (Report, error) {
	r := Report{
		Bwrap: l.bwrap, Version: l.version, Identity: l.id.String(),
		Cgroups: l.cgroups.Info(), ExactStatus: l.events != nil,
		Checks: map[string]bool{}, Ceilings: l.ceilings(), Mode: l.layout.mode.String(),
	}
	if l.events == nil {
		r.Warnings = append(r.Warnings, fmt.Sprintf("process events unavailable (%v): signal deaths are inferred from bwrap's exit code", l.eventErr))
	}
	out, exit, err := l.probeRun(ctx)
	if err != nil {
		err = withNamespaceHint(err)
		r.Problems = append(r.Problems, err.Error())
		r.Guarantees = l.guarantees(r)
		return r, fmt.Errorf("%w: probe: %w", ErrUnavailable, err)
	}
	r.StartLatency = exit.Duration
	facts := parseFacts(out)
	r.Checks = probeChecks(facts)
	if l.layout.mode == modeSetuid {
		// No user namespace: the command is the unprivileged host identity.
		delete(r.Checks, "user_namespace")
		uid, _ := l.layout.innerIDs(Policy{})
		r.Checks["host_identity"] = facts["uid"] == fmt.Sprint(uid) && uid != 0
	}
	l.initCheck(&r, facts)
	l.tenantFacts(&r)
	for _, name := range slices.Sorted(maps.Keys(r.Checks)) {
		if !r.Checks[name] {
			r.Problems = append(r.Problems, "check failed: "+name+probeSeen(name, facts))
		}
	}
	r.OK = len(r.Problems) == 0
	r.Guarantees = l.guarantees(r)
	if !r.OK {
		return r, fmt.Errorf("%w: probe found: %s", ErrUnavailable, strings.Join(r.Problems, "; "))
	}
	return r, nil
}

// withNamespaceHint adds how to allow namespaces to a probe that bwrap
// could not make them for: in a container, the runtime's seccomp profile
// or missing capabilities refuse them.
func withNamespaceHint(err error) error {
	msg := err.Error()
	if strings.Contains(msg, "namespace") && (strings.Contains(msg, "Operation not permitted") || strings.Contains(msg, "No permissions")) {
		return fmt.Errorf("%w (in a container: apply the profile termgate manifest seccomp prints and grant the capabilities docs/operations.md lists under where termgate runs)", err)
	}
	return err
}

// probeChecks judges the facts the probe script printed.
func probeChecks(facts map[string]string) map[string]bool {
	return map[string]bool{
		"user_namespace":   facts["uid"] == fmt.Sprint(sandboxUID),
		"hostname":         facts["host"] == DefaultHostname,
		"capabilities":     facts["CapEff"] == "0000000000000000",
		"no_new_privs":     facts["NoNewPrivs"] == "1",
		"seccomp":          facts["Seccomp"] == "2",
		"network_isolated": facts["net"] == "lo,",
		"shadow_hidden":    facts["shadow"] == "absent",
		"nested_userns":    facts["userns"] == "denied",
		"system_readonly":  facts["usr"] == "readonly",
		"workspace":        facts["workspace"] == "writable",
		// The filter's own answers: the kernel's would be a socket, or
		// EFAULT for io_uring's NULL parameters.
		"socket_families": facts["vsock"] == strconv.Itoa(int(syscall.EAFNOSUPPORT)),
		"io_uring":        facts["io_uring"] == strconv.Itoa(int(syscall.ENOSYS)),
		"dev_readonly":    facts["dev"] == "readonly",
		// Every node --dev binds is a character device, not a file a
		// container runtime left under it.
		"device_nodes": facts["devnode"] == "",
		// The probe may open probePTYs terminals of its own.
		"terminals_bounded": facts["pts"] == "max="+strconv.Itoa(probePTYs),
	}
}

// tenantFacts reports what keeps tenants apart beyond one sandbox: their
// own host ids and the workspace quota mechanism. Either missing is a
// warning: termgate exec needs neither, and serve refuses a quota it
// cannot apply.
func (l *Launcher) tenantFacts(r *Report) {
	if l.id.switchTo {
		t := l.cfg.TenantUIDs
		r.TenantUIDs = fmt.Sprintf("%d-%d", t.First, t.First+t.Count-1)
	} else {
		r.Warnings = append(r.Warnings, "not root: every tenant runs as termgate's own uid and shares the kernel's per-user limits")
	}
	info := l.cgroups.Info()
	r.TenantCgroups = os.Geteuid() == 0 && info.Memory && info.Pids && info.CPU
	if !r.TenantCgroups {
		r.Warnings = append(r.Warnings, "tenant cgroups unavailable (needs root and the memory, pids and cpu controllers): tenants are bounded only per execution")
	}
	if err := ProbeWorkspaceQuota(); err != nil {
		r.WorkspaceQuota = "unavailable: " + err.Error()
		r.Warnings = append(r.Warnings, "workspace quotas unavailable: "+err.Error())
		return
	}
	r.WorkspaceQuota = "ext4 image per tenant on a loop device"
}

// probePTYs is how many terminals the probe's sandbox may open.
const probePTYs = 2

// initCheck judges whether the sandbox's pid 1 is out of the command's
// reach, which takes Landlock: without it that is a warning, since only
// the sandbox itself suffers (it could be stopped or made to misreport).
func (l *Launcher) initCheck(r *Report, facts map[string]string) {
	if !l.layout.landlock {
		r.Warnings = append(r.Warnings, "no Landlock: with --proc private a command can open its sandbox's pid 1 through /proc/1/mem and keep the sandbox open or forge its exit status")
		return
	}
	r.Checks["init_out_of_reach"] = facts["init_mem"] == "closed"
}

// probeErrnoFacts maps the checks that read an errno to their fact.
var probeErrnoFacts = map[string]string{"socket_families": "vsock", "io_uring": "io_uring"}

// probeSeen says what a failed errno check saw instead, for the problem.
func probeSeen(check string, facts map[string]string) string {
	key, ok := probeErrnoFacts[check]
	if !ok {
		return ""
	}
	v := facts[key]
	n, err := strconv.Atoi(v)
	switch {
	case v == "unprobed":
		return " (no python3 or perl in the sandbox to probe with)"
	case err != nil:
		return fmt.Sprintf(" (probe printed %q)", v)
	case n == 0:
		return " (the call succeeded)"
	}
	return fmt.Sprintf(" (the call failed with %q)", syscall.Errno(n).Error())
}

func (l *Launcher) ceilings() map[string]bool {
	info := l.cgroups.Info()
	return map[string]bool{
		"cpu_seconds": true, "address_space": true, "file_size": true, "open_files": true,
		"memory": info.Memory, "pids": info.Pids || l.layout.nprocPids, "cpu_weight": info.CPU, "kill_tree": info.Kill,
	}
}

// probeRun runs the probe script and returns what it printed. Each
// stream has a buffer of its own, written by that stream's copier alone
// and read only after Wait, which returns once the copiers have ended: no
// buffer is shared between goroutines.
func (l *Launcher) probeRun(ctx context.Context) (string, Exit, error) {
	dir, err := os.MkdirTemp("", "termgate-probe-")
	if err != nil {
		return "", Exit{}, fmt.Errorf("create probe workspace: %w", err)
	}
	defer os.RemoveAll(dir)
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	proc, err := l.Start(ctx, Policy{
		Command: []string{"/bin/sh", "-c", probeScript}, Workspace: dir, Proc: ProcPrivate, PTYs: probePTYs,
		Key: "probe-" + randomName(), // through the keeper too, with a state directory
	}, Stdio{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return "", Exit{}, err
	}
	exit := proc.Wait()
	proc.Release() // nobody else records it
	if !exit.Success() {
		return stdout.String(), exit, fmt.Errorf("probe command %s: stdout %q, stderr %q", exit, stdout.String(), stderr.String())
	}
	return stdout.String(), exit, nil
}

func parseFacts(out string) map[string]string {
	facts := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			facts[k] = v
		}
	}
	return facts
}

func (id identity) String() string {
	s := fmt.Sprintf("%d:%d", id.uid, id.gid)
	if id.switchTo {
		s += " (dropped from root)"
	}
	return s
}
