package gateway

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
)

// BenchmarkAgentExec: short commands as an agent runs them, one after
// the other: POST /v1/exec, answered at the command's exit, against the
// same sandbox (the policy serve makes of that request) started and
// waited for by the launcher directly, and against that policy's plan
// run bare by bwrap (sandbox.RunBare: the same bwrap arguments, none of
// termgate around them). The three run in turns, so all see the same
// load. It reports each one's median round trip, the median of the
// per-turn ratios to the bare plan, and the machine's CPU per command
// (/proc/stat: the kernel's namespace teardown runs on its own threads,
// which no process's usage counts), a figure for a quiet machine.
// "plain" is the tests' shared launcher with no ceilings, in memory;
// "serve" is as serve runs by default: a keeper and a state directory,
// and serve's default ceilings on each execution (memory, pids, cpu
// weight, file size; tenant ceilings and workspace quotas are not set
// up here). -benchtime 1000x is the 1,000 commands.
func BenchmarkAgentExec(b *testing.B) {
	for _, setup := range []string{"plain", "serve"} {
		for _, argv := range [][]string{{"/bin/true"}, {"/bin/echo", "hi"}} {
			b.Run(setup+"/"+strings.TrimPrefix(argv[0], "/bin/"), func(b *testing.B) { benchAgentExec(b, setup == "serve", argv) })
		}
	}
}

func benchAgentExec(b *testing.B, serveDefaults bool, argv []string) {
	tweak := func(c *Config) {
		c.StartsPerMinute, c.Commands = 1<<30, []string{"/bin/bash", "/bin/sh", "/bin/true", "/bin/echo"}
		if serveDefaults {
			c.Sandbox.Limits = sandbox.Limits{Memory: 1 << 30, Pids: 512, FileSize: 1 << 30, CPUWeight: 100}
		}
	}
	l := needLauncher(b)
	sc := session.Config{Launcher: session.SandboxLauncher(l)}
	if serveDefaults {
		var dir string
		l, dir = durableLauncher(b)
		sc = session.Config{Launcher: session.SandboxLauncher(l), StateDir: dir}
	}
	e := newAPIEnvSession(b, sc, tweak)
	tok := e.token(b, "acme", auth.ScopeCreate, auth.ScopeAttach, auth.ScopeWrite)
	spec, err := e.srv.spec("acme", wire.Request{Type: wire.TypeStart, Command: argv[0], Args: argv[1:]})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	contenders := []func(){
		func() { // the agent exec, end to end
			status, _, body, err := e.do(context.Background(), http.MethodPost, "/v1/exec", tok, wire.ExecRequest{Argv: argv})
			if err != nil || status != http.StatusCreated {
				b.Fatalf("exec: %d %s %v", status, body, err)
			}
		},
		func() { // the launcher directly
			p := spec.Policy
			if serveDefaults {
				n++
				p.Key = "bench-" + strconv.Itoa(n) // a keeper's children are named
			}
			proc, err := l.Start(context.Background(), p, sandbox.Stdio{})
			if err != nil {
				b.Fatal(err)
			}
			if exit := proc.Wait(); !exit.Success() {
				b.Fatal(exit)
			}
			proc.Release()
		},
		func() { // the plan, bare
			if err := l.RunBare(spec.Policy); err != nil {
				b.Fatal(err)
			}
		},
	}
	names := []string{"exec", "launcher", "plan"}
	took := make([][]float64, len(contenders))
	cpu := make([]time.Duration, len(contenders))
	var ratios []float64
	for i := 0; b.Loop(); i++ {
		turn := make([]float64, len(contenders))
		for k := range contenders {
			c := (i + k) % len(contenders) // each goes first in turn
			busy, start := sandboxtest.MachineBusy(b), time.Now()
			contenders[c]()
			turn[c] = time.Since(start).Seconds() * 1000
			cpu[c] += sandboxtest.MachineBusy(b) - busy
			took[c] = append(took[c], turn[c])
		}
		ratios = append(ratios, turn[0]/turn[2])
	}
	for c, name := range names {
		b.ReportMetric(medianOf(took[c]), name+"-ms-p50")
		b.ReportMetric(float64(cpu[c].Microseconds())/1000/float64(b.N), name+"-cpu-ms")
	}
	b.ReportMetric(medianOf(ratios), "exec-x-plan")
	b.ReportMetric(float64(cpu[0])/float64(cpu[2]), "exec-cpu-x-plan")
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
