package session

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/netpolicy"
)

// ProxyAddr is where the program of an execution with a network policy
// (Spec.Network) finds its proxy: on the sandbox's own loopback, serving
// HTTP CONNECT, plain HTTP proxying and SOCKS5 on one port. The sandbox
// has its own network with nothing else in it: every connection out goes
// through the proxy, or, from a program that ignores the proxy variables,
// through the transparent listener (TransparentPort), and the policy
// decides each one.
const ProxyAddr = "127.0.0.1:3128"

// TransparentPort is where, on the sandbox's 127.0.0.1 (and ::1), the
// sandbox's redirect sends every other TCP connection out, and on UDP
// every datagram out but DNS (sandbox.Redirect), for programs that
// ignore the proxy variables; its DNS server answers on port 53 there,
// as the sandbox's resolv.conf says.
const TransparentPort = 3129

// egressSocket is one of egressSockets: the socket, whether it is IPv6's,
// and its role.
type egressSocket struct {
	sandbox.Socket
	v6   bool
	role int
}

// The roles of the sockets an execution with a network policy gets.
const (
	roleProxy = iota
	roleTransparent
	roleDNS
	roleDNSTCP
	roleUDP
)

// egressSockets are the sockets opened in the network of an execution
// with a network policy, and what each serves. IPv6 ones only where the
// kernel has IPv6 (hostIPv6).
var egressSockets = []egressSocket{
	{sandbox.Socket{Network: "tcp", Addr: ProxyAddr}, false, roleProxy},
	{sandbox.Socket{Network: "tcp4", Addr: fmt.Sprintf("127.0.0.1:%d", TransparentPort)}, false, roleTransparent},
	{sandbox.Socket{Network: "udp4", Addr: fmt.Sprintf("127.0.0.1:%d", sandbox.DNSPort)}, false, roleDNS},
	{sandbox.Socket{Network: "tcp4", Addr: fmt.Sprintf("127.0.0.1:%d", sandbox.DNSPort)}, false, roleDNSTCP},
	{sandbox.Socket{Network: "udp4", Addr: fmt.Sprintf("127.0.0.1:%d", TransparentPort), Redirected: true}, false, roleUDP},
	{sandbox.Socket{Network: "tcp6", Addr: fmt.Sprintf("[::1]:%d", TransparentPort)}, true, roleTransparent},
	{sandbox.Socket{Network: "udp6", Addr: fmt.Sprintf("[::1]:%d", sandbox.DNSPort)}, true, roleDNS},
	{sandbox.Socket{Network: "tcp6", Addr: fmt.Sprintf("[::1]:%d", sandbox.DNSPort)}, true, roleDNSTCP},
	{sandbox.Socket{Network: "udp6", Addr: fmt.Sprintf("[::1]:%d", TransparentPort), Redirected: true}, true, roleUDP},
}

// hostIPv6 reports whether this kernel has IPv6 loopback: a sandbox's
// network then has ::1 too.
var hostIPv6 = sync.OnceValue(func() bool {
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		return false
	}
	l.Close()
	return true
})

// proxyEnv is the environment an execution with a network policy gets,
// where its spec does not set the variable: curl reads the lower-case
// names only, most other programs either.
var proxyEnv = map[string]string{
	"HTTP_PROXY": "http://" + ProxyAddr, "http_proxy": "http://" + ProxyAddr,
	"HTTPS_PROXY": "http://" + ProxyAddr, "https_proxy": "http://" + ProxyAddr,
	"ALL_PROXY": "socks5h://" + ProxyAddr, "all_proxy": "socks5h://" + ProxyAddr,
	"NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1",
}

// ErrNoNetworkPolicy is wrapped by the ErrInvalidSpec of a start, and the
// error of a change, naming a network policy the server does not have.
var ErrNoNetworkPolicy = errors.New("no such network policy")

// ErrNetworkFixed is SetNetwork's answer for an execution without a
// proxy to change: one started without a network policy (its sandbox's
// network is none or host, for its life), or whose proxy failed.
var ErrNetworkFixed = errors.New("session: the execution's network cannot change while it runs")

// NetworkStatus is an execution's network: its policy now and what its
// proxy did so far.
type NetworkStatus struct {
	// Network is the policy's name, "none" or "host".
	Network string `json:"network"`
	// Open counts the connections open through the proxy now; Allowed,
	// Refused and Failed those asked for so far; Up and Down their bytes
	// to and from the targets. Zero without a policy.
	Open    int    `json:"open"`
	Allowed uint64 `json:"allowed"`
	Refused uint64 `json:"refused"`
	Failed  uint64 `json:"failed"`
	Up      uint64 `json:"bytes_up"`
	Down    uint64 `json:"bytes_down"`
}

// checkNetwork refuses a start that names a network policy the
// supervisor does not have. A restored execution is not checked: one
// whose policy is gone since is stopped as failed when its proxy cannot
// be served (guardNetwork), its output kept.
func (s *Supervisor) checkNetwork(spec Spec) error {
	if spec.Network == "" {
		return nil
	}
	if err := s.knownNetwork(spec.Network); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	return nil
}

// normalizeNetwork prepares the sandbox of a spec with a network policy:
// its own network; the proxy's, the transparent and the DNS listeners
// opened there before the command runs; the redirect of every other
// connection out to them; and the proxy variables.
func (s *Supervisor) normalizeNetwork(spec *Spec) error {
	if spec.Network == "" {
		return nil
	}
	if spec.Network == netpolicy.NameNone || spec.Network == netpolicy.NameHost {
		return fmt.Errorf("%w: network %q is a sandbox network, not a policy: set Policy.Network", ErrInvalidSpec, spec.Network)
	}
	p := &spec.Policy
	switch p.Network {
	case sandbox.NetworkHost:
		return fmt.Errorf("%w: network policy %q needs the sandbox's own network, not the host's", ErrInvalidSpec, spec.Network)
	case "":
		p.Network = sandbox.NetworkNone
	}
	for _, s := range egressSockets {
		if (!s.v6 || hostIPv6()) && !slices.Contains(p.Listen, s.Socket) {
			p.Listen = append(p.Listen, s.Socket)
		}
	}
	p.Redirect = &sandbox.Redirect{TCP: TransparentPort, DNS: sandbox.DNSPort, UDP: TransparentPort}
	if p.Env == nil {
		p.Env = map[string]string{}
	}
	for k, v := range proxyEnv {
		if _, ok := p.Env[k]; !ok {
			p.Env[k] = v
		}
	}
	return nil
}

// knownNetwork fails for a policy the supervisor's Egress does not hold.
func (s *Supervisor) knownNetwork(name string) error {
	if s.cfg.Egress == nil {
		return fmt.Errorf("%w: %q: no network policies on this server", ErrNoNetworkPolicy, name)
	}
	if name == netpolicy.NameNone {
		return nil
	}
	if _, ok := s.cfg.Egress.Set.Lookup(name); !ok {
		return fmt.Errorf("%w: %q (this server has %q)", ErrNoNetworkPolicy, name, s.cfg.Egress.Set.Names())
	}
	return nil
}

// socketsProcess and netnsProcess are the parts of *sandbox.Process that
// give a new process's sockets and an adopted one's network.
type (
	socketsProcess interface {
		Sockets(ctx context.Context) ([]sandbox.OpenSocket, error)
	}
	netnsProcess interface {
		NetNS() (*sandbox.NetNS, error)
	}
)

// guardNetwork serves the proxy of an execution with a network policy,
// on the listener its sandbox opened (a new process) or on one opened
// again in its network (an adopted one: the listener died with the
// server that opened it). An execution whose proxy cannot be served is
// stopped: its program would otherwise wait on a proxy that never
// answers.
func (e *execution) guardNetwork(proc Process, adopted bool) {
	if e.spec.Network == "" {
		return
	}
	err := errors.New("session: no network policies on this server")
	var ls netpolicy.Listeners
	if e.s.cfg.Egress != nil {
		ls, err = egressListeners(e.s.ctx, proc, e.spec.Policy, adopted)
	}
	if err == nil {
		var g *netpolicy.Guard
		g, err = e.s.cfg.Egress.Serve(netpolicy.Execution{Tenant: e.key.owner, ID: e.key.id, Policy: e.network(), Notify: e.networkNotice}, ls)
		if err == nil {
			e.mu.Lock()
			e.guard = g
			ended := e.res != nil
			e.mu.Unlock()
			if ended {
				g.Close()
			}
			return
		}
	}
	e.s.log.Error("network policy: the proxy cannot be served; stopping the execution", append(e.logAttrs, "err", err)...)
	e.mu.Lock()
	e.failed = fmt.Sprintf("network policy %q: its proxy could not start", e.networkLocked())
	e.noticeLocked(NoticeNetwork, time.Time{}, "network: "+e.failed+", so the "+e.noun()+" is stopped")
	e.mu.Unlock()
	e.stop(StatusFailed)
}

// egressListeners are the listeners in proc's network its Guard serves:
// those its sandbox opened before the command ran, or, for an adopted
// process (the listeners died with the server that opened them), its
// redirect installed again and the listeners opened again.
func egressListeners(ctx context.Context, proc Process, p sandbox.Policy, adopted bool) (netpolicy.Listeners, error) {
	socks, err := openEgress(ctx, proc, p, adopted)
	if err != nil {
		return netpolicy.Listeners{}, err
	}
	var ls netpolicy.Listeners
	for _, s := range socks {
		i := slices.IndexFunc(egressSockets, func(e egressSocket) bool { return e.Socket == s.Socket })
		switch {
		case i < 0:
			s.Close() // nobody serves it
		case egressSockets[i].role == roleProxy:
			ls.Proxy = s.Listener
		case egressSockets[i].role == roleTransparent:
			ls.Transparent = append(ls.Transparent, s.Listener)
		case egressSockets[i].role == roleDNS && ls.DNS == nil:
			ls.DNS = s.PacketConn
		case egressSockets[i].role == roleDNSTCP && ls.DNSTCP == nil:
			ls.DNSTCP = s.Listener
		case egressSockets[i].role == roleUDP:
			ls.UDP = append(ls.UDP, s.PacketConn.(netpolicy.PacketConn))
		default:
			s.Close() // a second DNS server of a kind: the first serves
		}
	}
	if ls.Proxy == nil {
		ls.Close()
		return netpolicy.Listeners{}, errors.New("session: the sandbox opened no proxy listener")
	}
	return ls, nil
}

// openEgress is the sockets of p.Listen in proc's network.
func openEgress(ctx context.Context, proc Process, p sandbox.Policy, adopted bool) ([]sandbox.OpenSocket, error) {
	if !adopted {
		sp, ok := proc.(socketsProcess)
		if !ok {
			return nil, errors.New("session: the launcher's process opens no sockets for a proxy")
		}
		return sp.Sockets(ctx)
	}
	np, ok := proc.(netnsProcess)
	if !ok {
		return nil, errors.New("session: the launcher's process has no network namespace to serve a proxy in")
	}
	ns, err := np.NetNS()
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	if p.Redirect != nil {
		if err := ns.Redirect(*p.Redirect); err != nil {
			return nil, err
		}
	}
	return ns.Open(p.Listen)
}

// network is the execution's policy name now. Called without e.mu.
func (e *execution) network() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.networkLocked()
}

func (e *execution) networkLocked() string {
	switch {
	case e.netPolicy != "":
		return e.netPolicy
	case e.spec.Network != "":
		return e.spec.Network
	}
	return string(e.spec.Policy.Network)
}

// networkNotice tells the execution's readers of a refused connection.
func (e *execution) networkNotice(msg string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.res == nil {
		e.noticeLocked(NoticeNetwork, time.Time{}, msg)
	}
}

// closeGuard stops the execution's proxy, once it ended, and keeps its
// counters.
func (e *execution) closeGuard() {
	e.mu.Lock()
	g := e.guard
	e.guard = nil
	e.mu.Unlock()
	if g == nil {
		return
	}
	g.Close()
	st := g.Status()
	e.mu.Lock()
	e.netFinal = st
	e.mu.Unlock()
}

// Network is the execution's network: its policy and its proxy's
// counters.
func (s *Supervisor) Network(owner, id string) (NetworkStatus, error) {
	e, err := s.lookup(owner, id)
	if err != nil {
		return NetworkStatus{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.netFinal
	if e.guard != nil {
		g = e.guard.Status()
	}
	return NetworkStatus{Network: e.networkLocked(), Open: g.Open, Allowed: g.Allowed, Refused: g.Refused, Failed: g.Failed, Up: g.Up, Down: g.Down}, nil
}

// SetNetwork changes the network policy of a running execution that has
// one: the connections asked for from now on follow policy (or "none"
// for no connection at all); those open are kept. The change is told to
// its readers and kept across a restart. An execution started without a
// policy has no proxy to change (ErrNetworkFixed), and a sandbox's network
// (none or host) cannot change while it runs.
func (s *Supervisor) SetNetwork(owner, id, policy string) (NetworkStatus, error) {
	e, err := s.lookup(owner, id)
	if err != nil {
		return NetworkStatus{}, err
	}
	if err := s.knownNetwork(policy); err != nil {
		return NetworkStatus{}, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	e.mu.Lock()
	g := e.guard
	switch {
	case e.res != nil || e.proc == nil:
		e.mu.Unlock()
		return NetworkStatus{}, fmt.Errorf("%w: %s", ErrNotRunning, id)
	case e.spec.Network == "" || g == nil:
		e.mu.Unlock()
		return NetworkStatus{}, fmt.Errorf("%w: %s has no network policy's proxy (network %q)", ErrNetworkFixed, id, e.networkLocked())
	}
	was := e.networkLocked()
	if err := g.SetPolicy(policy); err != nil {
		e.mu.Unlock()
		return NetworkStatus{}, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	e.netPolicy = policy
	if was != policy {
		e.noticeLocked(NoticeNetwork, time.Time{}, fmt.Sprintf("network: the policy is now %q (was %q) for new connections; %d open connections are kept", policy, was, g.Status().Open))
	}
	e.mu.Unlock()
	e.record(false)
	s.log.Info("network policy changed", append(e.logAttrs, "network", policy, "was", was)...)
	return s.Network(owner, id)
}
