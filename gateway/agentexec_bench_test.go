package gateway

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox"
)

// BenchmarkAgentExec: POST /v1/exec of true, answered at its exit,
// against the same sandbox (the policy serve makes of that request)
// started and waited for by the launcher directly, as termgate exec does
// without its own process start. The two run in turns, so both see the
// same load; it reports the medians and the median of their ratios.
func BenchmarkAgentExec(b *testing.B) {
	e := newAPIEnv(b, func(c *Config) { c.StartsPerMinute, c.Commands = 1<<30, []string{"/bin/bash", "/bin/sh", "/bin/true"} })
	tok := e.token(b, "acme", auth.ScopeCreate, auth.ScopeAttach, auth.ScopeWrite)
	spec, err := e.srv.spec("acme", wire.Request{Type: wire.TypeStart, Command: "/bin/true"})
	if err != nil {
		b.Fatal(err)
	}
	l := needLauncher(b)
	bare := func() time.Duration {
		start := time.Now()
		proc, err := l.Start(context.Background(), spec.Policy, sandbox.Stdio{})
		if err != nil {
			b.Fatal(err)
		}
		if exit := proc.Wait(); !exit.Success() {
			b.Fatal(exit)
		}
		took := time.Since(start)
		proc.Release()
		return took
	}
	agent := func() time.Duration {
		start := time.Now()
		status, _, body, err := e.do(context.Background(), http.MethodPost, "/v1/exec", tok, wire.ExecRequest{Argv: []string{"/bin/true"}})
		if err != nil || status != http.StatusCreated {
			b.Fatalf("exec: %d %s %v", status, body, err)
		}
		return time.Since(start)
	}
	var ours, plain, ratios []float64
	for i := 0; b.Loop(); i++ {
		var a, p time.Duration
		if i%2 == 0 {
			a, p = agent(), bare()
		} else {
			p, a = bare(), agent()
		}
		ours, plain, ratios = append(ours, a.Seconds()*1000), append(plain, p.Seconds()*1000), append(ratios, float64(a)/float64(p))
	}
	b.ReportMetric(medianOf(ours), "ms-exec-p50")
	b.ReportMetric(medianOf(plain), "ms-bare-p50")
	b.ReportMetric(medianOf(ratios), "x-bare")
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
