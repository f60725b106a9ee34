package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/termgate/termgate/sandbox"
)

func verifyFlags(asJSON *bool, cfg *sandbox.Config) *flag.FlagSet {
	fs := newFlagSet("verify")
	fs.BoolVar(asJSON, "json", false, "print the report as JSON")
	fs.Func("sandbox-uid", fmt.Sprintf("host uid the sandbox runs as when termgate is root (default %d) (env TERMGATE_SANDBOX_UID)", sandbox.DefaultUID), idFlag(&cfg.UID))
	fs.Func("sandbox-gid", fmt.Sprintf("host gid the sandbox runs as when termgate is root (default %d) (env TERMGATE_SANDBOX_GID)", sandbox.DefaultGID), idFlag(&cfg.GID))
	fs.Func("pids-fallback", pidsFallbackUsage+" (env TERMGATE_PIDS_FALLBACK)", pidsFallbackFlag(&cfg.PidsFallback))
	return fs
}

func verifyFlagSet() *flag.FlagSet { return verifyFlags(new(bool), new(sandbox.Config)) }

func runVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg sandbox.Config
	if err := envDefaults(&cfg); err != nil {
		return usageError{err}
	}
	var asJSON bool
	fs := verifyFlags(&asJSON, &cfg)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("verify: unexpected argument %q", fs.Arg(0))}
	}
	cfg.Logger = newLogger(io.Discard)
	l, err := sandbox.NewLauncher(cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	report, perr := l.Probe(ctx)
	net := networkReport{Problem: "the sandbox itself failed its checks"}
	if perr == nil {
		net = networkReport{Proxy: true, Redirect: true}
		var problems []string
		if err := l.ProbeSockets(ctx); err != nil {
			net.Proxy, problems = false, append(problems, err.Error())
		}
		if err := l.CheckRedirect(ctx); err != nil {
			net.Redirect, problems = false, append(problems, err.Error())
		}
		net.Problem = strings.Join(problems, "; ")
	}
	report.Guarantees = append(report.Guarantees, net.guarantee())
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(verifyReport{report, net}); err != nil {
			return err
		}
	} else {
		printReport(stdout, report)
		printNetwork(stdout, net)
	}
	return perr
}

// verifyReport is verify's JSON: the sandbox's report, and what network
// policies can be enforced here. A host that cannot enforce them still
// runs sandboxes: verify fails only with the sandbox.
type verifyReport struct {
	sandbox.Report
	Network networkReport `json:"network_policies"`
}

// networkReport says whether both parts of a network policy can be
// enforced on this host: the proxy in a sandbox's network
// (sandbox.Launcher.ProbeSockets), and the redirect of the sandbox's
// other connections to termgate (CheckRedirect). serve offers policies
// only with both.
type networkReport struct {
	Proxy    bool   `json:"proxy"`
	Redirect bool   `json:"redirect"`
	Problem  string `json:"problem,omitempty"`
}

// guarantee is the network policies' line in the guarantees.
func (n networkReport) guarantee() sandbox.Guarantee {
	if n.Proxy && n.Redirect {
		return sandbox.Guarantee{Name: "network_policies", State: sandbox.Held, Detail: "a proxy in each sandbox's network and a redirect of its other connections (--network-policy)"}
	}
	return sandbox.Guarantee{Name: "network_policies", State: sandbox.Missing, Detail: n.Problem}
}

func printNetwork(w io.Writer, n networkReport) {
	yes := map[bool]string{true: "yes", false: "no"}
	fmt.Fprintf(w, "\nnetwork policies (--network-policy):\n  %-18s %s\n  %-18s %s\n", "proxy", yes[n.Proxy], "redirect", yes[n.Redirect])
	if n.Problem != "" {
		fmt.Fprintf(w, "problem: network policies: %s\n", n.Problem)
	}
}

func printReport(w io.Writer, r sandbox.Report) {
	verdict := "OK: this host can run termgate sandboxes"
	if !r.OK {
		verdict = "FAIL: this host cannot isolate commands"
	}
	fmt.Fprintf(w, "%s\n\nbwrap      %s (%s)\nidentity   %s\ntenants    %s\nquota      %s\ncgroups    %s, %s\nexit codes %s\nstart      %v\n",
		verdict, r.Bwrap, r.Version, r.Identity, orNone(r.TenantUIDs), r.WorkspaceQuota, r.Cgroups.Version,
		tenantGroups(r.TenantCgroups), exactness(r.ExactStatus), r.StartLatency.Round(1e5))
	section(w, "checks", r.Checks)
	section(w, "ceilings", r.Ceilings)
	printGuarantees(w, r.Guarantees)
	for _, p := range r.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
	for _, p := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", p)
	}
}

// printGuarantees lists each promise as held, degraded or missing.
func printGuarantees(w io.Writer, gs []sandbox.Guarantee) {
	fmt.Fprintf(w, "\nguarantees:\n")
	for _, g := range gs {
		fmt.Fprintf(w, "  %-18s %-8s %s\n", g.Name, g.State, guaranteeDetail(g))
	}
}

// guaranteeDetail is a guarantee's detail with the flag that degraded it.
func guaranteeDetail(g sandbox.Guarantee) string {
	if g.Flag != "" {
		return g.Detail + " (" + g.Flag + ")"
	}
	return g.Detail
}

func tenantGroups(ok bool) string {
	if ok {
		return "a cgroup per tenant above its executions'"
	}
	return "no tenant cgroups"
}

func orNone(s string) string {
	if s == "" {
		return "one shared identity"
	}
	return "own host uid each, from " + s
}

func exactness(exact bool) string {
	if exact {
		return "exact (kernel process events)"
	}
	return "inferred from bwrap (signal n shows as 128+n)"
}

func section(w io.Writer, title string, m map[string]bool) {
	fmt.Fprintf(w, "\n%s:\n", title)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		mark := "no"
		if m[k] {
			mark = "yes"
		}
		fmt.Fprintf(w, "  %-18s %s\n", k, mark)
	}
}
