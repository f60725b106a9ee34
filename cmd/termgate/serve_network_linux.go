package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/netpolicy"
)

// networkOptions are serve's network policy flags.
type networkOptions struct {
	policies          []string // --network-policy NAME=FILE
	dns               string   // --network-dns: the resolver's server; "" the host's
	connectTimeout    time.Duration
	maxConnsPerExec   int
	maxConnsPerTenant int
}

func (n *networkOptions) register(e *envFlags, o *serveOptions) {
	e.str(&o.network, "network", "none", "network of a start that names none: none (loopback only), host (the host's, no policy), or a network policy's name (--network-policy)")
	e.list(&n.policies, "network-policy", "a network policy, NAME=FILE: a TOML file of allow and deny rules (docs/network.md); a start names it with \"network\" and a token scope net:NAME (net:* for any); SIGHUP reloads the files, and a bad one keeps its previous rules")
	e.boolean(&o.policy.AllowHostNetwork, "network-allow-host", false, "let a start ask for the host's whole network (\"network\":\"host\", with the net:host scope)")
	e.str(&n.dns, "network-dns", "", "DNS server, IP:PORT, that resolves the names a network policy allows (default: the host's resolver, /etc/resolv.conf)")
	e.duration(&n.connectTimeout, "network-connect-timeout", netpolicy.DefaultTimeout, "how long a policy's proxy may take to resolve and connect one connection")
	e.parsed("network-max-conns-per-execution", fmt.Sprintf("connections one execution may hold open through its proxy; beyond it 503 (default %d)", netpolicy.DefaultMaxConnsPerExecution), intPtr(&n.maxConnsPerExec, netpolicy.DefaultMaxConnsPerExecution))
	e.parsed("network-max-conns-per-tenant", fmt.Sprintf("connections a tenant's executions may hold open through their proxies together; beyond it 403 with the reason (default %d)", netpolicy.DefaultMaxConnsPerTenant), intPtr(&n.maxConnsPerTenant, netpolicy.DefaultMaxConnsPerTenant))
}

// files parses --network-policy into policy names and their files.
func (n *networkOptions) files() (map[string]string, error) {
	files := map[string]string{}
	for _, p := range n.policies {
		name, file, ok := strings.Cut(p, "=")
		if !ok || file == "" {
			return nil, fmt.Errorf("serve: --network-policy %q: want NAME=FILE", p)
		}
		if err := netpolicy.ValidName(name); err != nil {
			return nil, fmt.Errorf("serve: --network-policy %q: %w", p, err)
		}
		if _, dup := files[name]; dup {
			return nil, fmt.Errorf("serve: --network-policy: %q is given twice", name)
		}
		files[name] = file
	}
	return files, nil
}

// checkNetwork checks --network against the policies given.
func (o *serveOptions) checkNetwork() error {
	files, err := o.net.files()
	if err != nil {
		return usageError{err}
	}
	if o.net.dns != "" {
		if _, _, err := net.SplitHostPort(o.net.dns); err != nil {
			return usageError{fmt.Errorf("serve: --network-dns %q: want IP:PORT", o.net.dns)}
		}
	}
	switch o.network {
	case netpolicy.NameNone, netpolicy.NameHost:
		return nil
	}
	if _, ok := files[o.network]; !ok {
		return usageError{fmt.Errorf("serve: --network: want none, host or a policy given with --network-policy, got %q", o.network)}
	}
	return nil
}

// buildEgress loads the network policies (nil without any) and sets the
// server's default network.
func (o *serveOptions) buildEgress(log *slog.Logger) (*netpolicy.Egress, error) {
	o.policy.Network = sandbox.NetworkNone
	switch o.network {
	case netpolicy.NameHost:
		o.policy.Network = sandbox.NetworkHost
	case netpolicy.NameNone:
	default:
		o.policy.NetworkPolicy = o.network
	}
	files, err := o.net.files()
	if err != nil || len(files) == 0 {
		return nil, err
	}
	set, err := netpolicy.NewSet(files)
	if err != nil {
		return nil, fmt.Errorf("serve: refusing to start: %w", err)
	}
	d := &netpolicy.Dialer{Timeout: o.net.connectTimeout}
	if o.net.dns != "" {
		d.Resolver = netpolicy.NewResolver(o.net.dns)
	}
	e := &netpolicy.Egress{Set: set, Dialer: d, MaxConnsPerExecution: o.net.maxConnsPerExec, MaxConnsPerTenant: o.net.maxConnsPerTenant}
	log.Info("network policies", "names", set.Names(), "digest", set.Digest(), "default", o.network)
	return e, nil
}

// verifyEgress refuses to offer network policies on a host that cannot
// enforce both of their parts: the proxy in each sandbox's network, and
// the redirect of every other connection out to termgate's listeners.
func (o *serveOptions) verifyEgress(ctx context.Context, l *sandbox.Launcher, e *netpolicy.Egress) error {
	if e == nil {
		return nil
	}
	if err := l.ProbeSockets(ctx); err != nil {
		return fmt.Errorf("serve: refusing to start: network policies need their proxy in each sandbox's network, and this host cannot: %w", err)
	}
	if err := l.CheckRedirect(ctx); err != nil {
		return fmt.Errorf("serve: refusing to start: network policies need each sandbox's other connections redirected to termgate, and this host cannot: %w", err)
	}
	return nil
}

// reloadPolicies re-reads the network policy files on SIGHUP: a file
// that fails keeps its policy's previous rules.
func reloadPolicies(e *netpolicy.Egress, log *slog.Logger) {
	if e == nil {
		return
	}
	if err := e.Set.Reload(); err != nil {
		log.Error("network policies not all reloaded: those that fail keep their previous rules", "err", err, "digest", e.Set.Digest())
		return
	}
	log.Info("network policies reloaded", "names", e.Set.Names(), "digest", e.Set.Digest())
}
