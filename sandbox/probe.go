package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// Report is what Probe found this host can enforce.
type Report struct {
	OK           bool            `json:"ok"`
	Bwrap        string          `json:"bwrap"`
	Version      string          `json:"version"`
	Identity     string          `json:"identity"`
	Checks       map[string]bool `json:"checks"`
	Ceilings     map[string]bool `json:"ceilings"`
	Cgroups      CgroupInfo      `json:"cgroups"`
	ExactStatus  bool            `json:"exact_exit_status"`
	StartLatency time.Duration   `json:"start_latency_ns"`
	Problems     []string        `json:"problems,omitempty"` // isolation is broken
	Warnings     []string        `json:"warnings,omitempty"` // isolation holds, reporting is degraded
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
`

// Probe runs real commands in the sandbox and reports what the host
// enforces. The error is non-nil when the sandbox cannot run at all.
func (l *Launcher) Probe(ctx context.Context) (Report, error) {
	r := Report{
		Bwrap: l.bwrap, Version: l.version, Identity: l.id.String(),
		Cgroups: l.cgroups.Info(), ExactStatus: l.events != nil,
		Checks: map[string]bool{}, Ceilings: l.ceilings(),
	}
	if l.events == nil {
		r.Warnings = append(r.Warnings, fmt.Sprintf("process events unavailable (%v): signal deaths are inferred from bwrap's exit code", l.eventErr))
	}
	out, exit, err := l.probeRun(ctx)
	if err != nil {
		r.Problems = append(r.Problems, err.Error())
		return r, fmt.Errorf("%w: probe: %w", ErrUnavailable, err)
	}
	r.StartLatency = exit.Duration
	facts := parseFacts(out)
	for name, ok := range map[string]bool{
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
	} {
		r.Checks[name] = ok
		if !ok {
			r.Problems = append(r.Problems, "check failed: "+name)
		}
	}
	r.OK = len(r.Problems) == 0
	if !r.OK {
		return r, fmt.Errorf("%w: probe found: %s", ErrUnavailable, strings.Join(r.Problems, "; "))
	}
	return r, nil
}

func (l *Launcher) ceilings() map[string]bool {
	info := l.cgroups.Info()
	return map[string]bool{
		"cpu_seconds": true, "address_space": true, "file_size": true, "open_files": true,
		"memory": info.Memory, "pids": info.Pids, "cpu_weight": info.CPU, "kill_tree": info.Kill,
	}
}

func (l *Launcher) probeRun(ctx context.Context) (string, Exit, error) {
	dir, err := os.MkdirTemp("", "termgate-probe-")
	if err != nil {
		return "", Exit{}, fmt.Errorf("create probe workspace: %w", err)
	}
	defer os.RemoveAll(dir)
	var out syncBuffer
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	proc, err := l.Start(ctx, Policy{
		Command: []string{"/bin/sh", "-c", probeScript}, Workspace: dir, Proc: ProcPrivate,
	}, Stdio{Stdout: &out, Stderr: &out})
	if err != nil {
		return "", Exit{}, err
	}
	exit := proc.Wait()
	if !exit.Success() {
		return out.String(), exit, fmt.Errorf("probe command %s: %q", exit, out.String())
	}
	return out.String(), exit, nil
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

// syncBuffer is a bytes.Buffer safe for the two output copiers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
