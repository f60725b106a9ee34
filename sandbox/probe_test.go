//go:build linux

package sandbox

import (
	"maps"
	"os"
	"testing"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestProbeReportsSeccompControls checks that verify sees the socket
// family and io_uring rules at work inside a real sandbox.
func TestProbeReportsSeccompControls(t *testing.T) {
	t.Parallel()
	l := needLauncher(t)
	r, err := l.Probe(t.Context())
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	for _, name := range []string{"socket_families", "io_uring"} {
		if ok, found := r.Checks[name]; !found || !ok {
			t.Errorf("check %s: reported %v, passed %v; problems %q", name, found, ok, r.Problems)
		}
	}
}

// TestProbeSeccompInterpreters runs each interpreter's half of the probe
// in a real sandbox: verify must judge the same with either.
func TestProbeSeccompInterpreters(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, interp, flag, code string }{
		{"python3", "/usr/bin/python3", "-c", probeSeccompPython},
		{"perl", "/usr/bin/perl", "-e", probeSeccompPerl},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := os.Stat(tt.interp); err != nil {
				sandboxtest.Unavailable(t, "%s not found: %v", tt.interp, err)
			}
			r := runPolicy(t, Policy{Command: []string{tt.interp, tt.flag, tt.code}})
			checks := probeChecks(parseFacts(r.stdout))
			if !r.exit.Success() || !checks["socket_families"] || !checks["io_uring"] {
				t.Errorf("checks %v from %v", checks, r)
			}
		})
	}
}

func TestProbeChecksSeccompFacts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, vsock, ioUring string
		sockets, uring       bool
		seen                 string // of socket_families
	}{
		{"refused", "97", "38", true, true, ""},
		{"vsock created", "0", "38", false, true, " (the call succeeded)"},
		{"unfiltered", "0", "14", false, false, " (the call succeeded)"},
		{"io_uring disabled by the host", "97", "1", true, false, ""},
		{"family missing, not filtered", "22", "38", false, true, ` (the call failed with "invalid argument")`},
		{"no interpreter", "unprobed", "unprobed", false, false, " (no python3 or perl in the sandbox to probe with)"},
		{"nothing printed", "", "", false, false, ` (probe printed "")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			facts := map[string]string{"vsock": tt.vsock, "io_uring": tt.ioUring}
			checks := probeChecks(facts)
			if checks["socket_families"] != tt.sockets || checks["io_uring"] != tt.uring {
				t.Errorf("socket_families %v, io_uring %v; want %v, %v",
					checks["socket_families"], checks["io_uring"], tt.sockets, tt.uring)
			}
			if got := probeSeen("socket_families", facts); !tt.sockets && got != tt.seen {
				t.Errorf("seen %q, want %q", got, tt.seen)
			}
		})
	}
	if got := probeSeen("hostname", map[string]string{}); got != "" {
		t.Errorf("a check without an errno fact says %q", got)
	}
}

// TestProbeChecksDevTerminalsAndInit: the facts of /dev, the terminals'
// bound and the init's reach each fail their check when wrong.
func TestProbeChecksDevTerminalsAndInit(t *testing.T) {
	t.Parallel()
	good := map[string]string{"dev": "readonly", "pts": "max=2", "init_mem": "closed"}
	if c := probeChecks(good); !c["dev_readonly"] || !c["terminals_bounded"] {
		t.Errorf("good facts fail: %v", c)
	}
	for _, bad := range []struct{ key, value, check string }{
		{"dev", "writable", "dev_readonly"},
		{"pts", "", "terminals_bounded"},
		{"pts", "max=1048576", "terminals_bounded"},
	} {
		facts := maps.Clone(good)
		facts[bad.key] = bad.value
		if probeChecks(facts)[bad.check] {
			t.Errorf("%s=%q passes %s", bad.key, bad.value, bad.check)
		}
	}
	l := &Launcher{layout: hostLayout{landlock: true}}
	r := Report{Checks: map[string]bool{}}
	l.initCheck(&r, map[string]string{"init_mem": "open"})
	if ok, present := r.Checks["init_out_of_reach"]; ok || !present {
		t.Errorf("an open /proc/1/mem with Landlock: %v", r.Checks)
	}
	l.layout.landlock = false
	r = Report{Checks: map[string]bool{}}
	l.initCheck(&r, map[string]string{"init_mem": "open"})
	if len(r.Warnings) != 1 || len(r.Checks) != 0 {
		t.Errorf("without Landlock: %+v", r)
	}
}
