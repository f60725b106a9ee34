//go:build linux

package sandbox

import (
	"cmp"
	"fmt"
	"strings"
)

// The states of a Guarantee.
const (
	Held     = "held"
	Degraded = "degraded" // held in a weaker form the operator asked for by Flag
	Missing  = "missing"
	// Off: the host could keep it, and the configuration (Flag) does not
	// ask for it. Probe never reports it; serve does.
	Off = "off"
)

// Guarantee is one promise of the sandbox and how this host keeps it.
type Guarantee struct {
	Name  string `json:"name"`
	State string `json:"state"` // Held, Degraded, Missing or Off
	// Detail says how it is held, what the degraded form gives up, or
	// why it is missing.
	Detail string `json:"detail"`
	// Flag is the operator's flag that allowed a degraded form, or that
	// turned it off.
	Flag string `json:"flag,omitempty"`
}

// PidsFallbackFlag is the flag that sets Config.PidsFallback, named in
// the guarantee it degrades.
const PidsFallbackFlag = "--pids-fallback rlimit"

// guarantees lists what the probe found, one entry per promise, in a
// fixed order: isolation first, then ceilings, then what keeps tenants
// apart and what reporting needs.
func (l *Launcher) guarantees(r Report) []Guarantee {
	info := l.cgroups.Info()
	g := []Guarantee{l.isolation(r)}
	g = append(g,
		l.pidsGuarantee(info.Pids),
		cgroupGuarantee("memory_ceiling", info.Memory, "memory"),
		cgroupGuarantee("cpu_weight", info.CPU, "cpu"),
		either("tenant_cgroups", r.TenantCgroups, "a cgroup per tenant above its executions' (--tenant-memory, --tenant-pids, --tenant-cpu-weight)",
			"needs root and the memory, pids and cpu controllers: tenants are bounded only per execution"),
		either("tenant_uids", r.TenantUIDs != "", "each tenant runs as a host uid of its own, from "+r.TenantUIDs,
			"not root: every tenant runs as termgate's own uid"),
		quotaGuarantee(r.WorkspaceQuota),
		either("private_proc", r.Checks["init_out_of_reach"], "a private /proc whose pid 1 Landlock keeps out of the command's reach (--proc private)",
			"no Landlock: --proc auto gives sandboxes no /proc"),
		either("exact_exit_status", r.ExactStatus, "kernel process events tell signal deaths apart",
			"no process events: a signal death shows as 128+n"),
	)
	return g
}

// isolation is the sandbox itself: every probe check passed. serve does
// not start without it.
func (l *Launcher) isolation(r Report) Guarantee {
	if !r.OK {
		return Guarantee{Name: "isolation", State: Missing, Detail: strings.Join(r.Problems, "; ")}
	}
	how := "bwrap makes a user namespace of its own"
	if l.layout.mode == modeSetuid {
		how = fmt.Sprintf("a setuid-root bwrap makes the namespaces with its privilege: no user namespace, the command runs as host uid %d (a tenant's own uid for a tenant)", l.id.uid)
	}
	return Guarantee{Name: "isolation", State: Held, Detail: how + "; pid, ipc, uts, cgroup, mount and network namespaces, no capabilities, no-new-privs, seccomp"}
}

func (l *Launcher) pidsGuarantee(controller bool) Guarantee {
	switch {
	case controller:
		return Guarantee{Name: "pids_ceiling", State: Held, Detail: "pids cgroup per execution"}
	case l.layout.nprocPids && (l.layout.mode == modeSetuid || !nprocPerNamespace()):
		return Guarantee{Name: "pids_ceiling", State: Degraded, Flag: PidsFallbackFlag,
			Detail: "no pids controller: RLIMIT_NPROC counts every process of the host uid (" + nprocScope(l.layout.mode) + "), so the ceiling is shared by every execution of that uid, bwrap's own processes included"}
	case l.layout.nprocPids:
		return Guarantee{Name: "pids_ceiling", State: Degraded, Flag: PidsFallbackFlag,
			Detail: "no pids controller: RLIMIT_NPROC, counted per execution in its own user namespace (threads included, as a pids cgroup counts them)"}
	}
	return Guarantee{Name: "pids_ceiling", State: Missing, Detail: "no pids cgroup controller: --pids is refused (" + PidsFallbackFlag + " enforces it as RLIMIT_NPROC)"}
}

// nprocPerNamespace reports whether the kernel counts RLIMIT_NPROC per
// user namespace (5.14, ucounts): before, per host uid only.
func nprocPerNamespace() bool { return kernelAtLeast(5, 14) }

// nprocScope says why RLIMIT_NPROC counts per host uid here.
func nprocScope(m launchMode) string {
	if m == modeSetuid {
		return "setuid bwrap: no user namespace"
	}
	return "a kernel before 5.14 counts per host uid, not per user namespace"
}

func cgroupGuarantee(name string, ok bool, controller string) Guarantee {
	return either(name, ok, controller+" cgroup per execution", "no "+controller+" cgroup controller: the ceiling is refused")
}

func quotaGuarantee(quota string) Guarantee {
	if why, ok := strings.CutPrefix(quota, "unavailable: "); ok || quota == "" {
		return Guarantee{Name: "workspace_quota", State: Missing, Detail: cmp.Or(why, "not probed: the sandbox failed first")}
	}
	return Guarantee{Name: "workspace_quota", State: Held, Detail: quota}
}

func either(name string, ok bool, held, missing string) Guarantee {
	if ok {
		return Guarantee{Name: name, State: Held, Detail: held}
	}
	return Guarantee{Name: name, State: Missing, Detail: missing}
}
