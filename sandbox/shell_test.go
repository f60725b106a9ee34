//go:build linux

package sandbox

import (
	"slices"
	"strings"
	"testing"
)

// dataDests lists where the plan's --ro-bind-data mounts go, in order,
// with the bytes each gets.
func dataDests(pl plan) map[string]string {
	out := map[string]string{}
	for i, o := range pl.opts {
		if o == "--ro-bind-data" {
			var fd int
			for _, c := range pl.opts[i+1] {
				fd = fd*10 + int(c-'0')
			}
			out[pl.opts[i+2]] = string(pl.files[fd-firstFileFD].data)
		}
	}
	return out
}

// TestPlanNamesLocalhost: every sandbox has an /etc/hosts that names
// localhost and its hostname, and an /etc/hostname; with host networking
// the host's own /etc/hosts is shown instead.
func TestPlanNamesLocalhost(t *testing.T) {
	t.Parallel()
	data := dataDests(testPlan(t, Policy{Command: []string{"true"}}))
	if h := data["/etc/hosts"]; !strings.Contains(h, "127.0.0.1\tlocalhost\n") || !strings.Contains(h, "::1\tlocalhost") || !strings.Contains(h, "\t"+DefaultHostname+"\n") {
		t.Errorf("/etc/hosts = %q", h)
	}
	if h := data["/etc/hostname"]; h != DefaultHostname+"\n" {
		t.Errorf("/etc/hostname = %q", h)
	}
	layout := testLayout
	layout.hostNet = map[string][]byte{"/etc/hosts": []byte("127.0.0.1 localhost\n10.0.0.1 db\n")}
	p := Policy{Command: []string{"true"}, Workspace: "/srv/ws/tenant", Network: NetworkHost}.Normalize()
	data = dataDests(buildPlan(p, layout, nil))
	if h := data["/etc/hosts"]; h != "127.0.0.1 localhost\n10.0.0.1 db\n" {
		t.Errorf("with host networking, /etc/hosts = %q", h)
	}
}

// TestSandboxResolvesLocalhost: a program in a real sandbox finds
// localhost and its own hostname through the name service.
func TestSandboxResolvesLocalhost(t *testing.T) {
	t.Parallel()
	r := runPolicy(t, Policy{Command: sh("getent hosts localhost; getent hosts \"$(hostname)\"; cat /etc/hostname")})
	if !r.exit.Success() || !strings.Contains(r.stdout, "localhost") || !strings.Contains(r.stdout, "127.0.1.1") || !strings.HasSuffix(r.stdout, DefaultHostname+"\n") {
		t.Fatalf("name lookups in the sandbox: %v", r)
	}
}

// TestPrivateProcShowsOnlyTheSandbox: with a private procfs, ps and top
// work and list the sandbox's own processes, none of the host's; the
// sandbox's pid 1 (bwrap, started with the server's environment) keeps its
// environment to itself.
func TestPrivateProcShowsOnlyTheSandbox(t *testing.T) {
	t.Parallel()
	r := runPolicy(t, Policy{Proc: ProcPrivate, Command: sh(`ps -e -o pid=,comm=; echo ---; top -b -n 1 >/dev/null && echo top=ok; ` +
		`cat /proc/1/environ >/dev/null 2>&1 && echo environ=open || echo environ=closed`)})
	list, rest, ok := strings.Cut(r.stdout, "---\n")
	if !r.exit.Success() || !ok {
		t.Fatalf("ps in the sandbox: %v", r)
	}
	var comms []string
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("ps line %q in %v", line, r)
		}
		comms = append(comms, f[1])
	}
	slices.Sort(comms)
	if want := []string{"bwrap", "ps", "sh"}; !slices.Equal(comms, want) {
		t.Errorf("processes seen: %q, want %q (the sandbox's own only)", comms, want)
	}
	if !strings.Contains(rest, "top=ok") || !strings.Contains(rest, "environ=closed") {
		t.Errorf("top or /proc/1/environ: %v", r)
	}
}
