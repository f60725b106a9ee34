package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/termgate/termgate/sandbox/netpolicy/internal/proxy"
)

// The limits an Egress holds executions to, when its fields are zero.
const (
	// DefaultMaxConnsPerExecution bounds one execution's connections to
	// its proxy at once (and so the connections it has made through it).
	DefaultMaxConnsPerExecution = 1024
	// DefaultMaxConnsPerTenant bounds the connections a tenant's
	// executions have made through their proxies at once, together.
	DefaultMaxConnsPerTenant = 4096
)

// sameLookup is how long the refusals of one name count as one: the
// queries a resolver makes for one lookup (A, AAAA, retries).
const sameLookup = time.Second

// The pace of a Guard's notices: a burst of noticeBurst, then one every
// noticeEvery. Refusals beyond it are counted and named in the next
// notice.
const (
	noticeBurst = 5
	noticeEvery = 500 * time.Millisecond
)

// Egress serves the proxies of the executions that have a network
// policy: one Guard per execution, each answering on a listener in the
// execution's own network, connecting through Dialer as the execution's
// policy (from Set) allows. Set the fields before the first Serve. Its
// methods are safe for concurrent use.
type Egress struct {
	Set    *Set
	Dialer *Dialer
	// MaxConnsPerExecution and MaxConnsPerTenant bound connections
	// (DefaultMaxConnsPerExecution and DefaultMaxConnsPerTenant if 0). A
	// connection beyond the execution's is answered 503; beyond the
	// tenant's, 403 with the reason.
	MaxConnsPerExecution int
	MaxConnsPerTenant    int
	// Observe, if set, is told of every connection asked for: refused,
	// failed, or made, and then of each made one's end with its bytes.
	// It is called on the connection's goroutine and should not block.
	Observe func(Event)

	mu      sync.Mutex
	tenants map[string]int       // connections open, by tenant
	stats   map[string]*Counters // by policy name
	guards  map[*Guard]struct{}  // serving
}

// Event is one connection an execution's program asked for, or the end
// of one that was made.
type Event struct {
	Tenant, Execution string
	// Protocol is how the program asked: "http-connect", "http" (plain
	// HTTP forwarding), "socks5" or "transparent" (redirected). It is set
	// on an Ended event only: the policy decides before the proxy says.
	Protocol string
	// Decision is the policy's: Allowed, the rule and the reason. Its
	// Policy is the execution's policy when it was asked.
	Decision Decision
	// Err is why a connection neither refused nor made failed: the
	// target did not answer, a limit, the execution ending.
	Err error
	// Ended marks the end of a connection that was made; Up and Down
	// count its bytes to and from the target.
	Ended    bool
	Up, Down int64
	// Dropped counts the bytes of a UDP flow's datagrams that could not
	// be passed on (a full queue or socket, too many flows): on an Ended
	// event, or with Err when the flow never started.
	Dropped int64
}

// Counters are a policy's connections and bytes, over the server's life.
type Counters struct {
	Allowed, Refused, Failed uint64
	Up, Down                 uint64
}

// Stats is the counters of every policy that decided a connection.
func (e *Egress) Stats() map[string]Counters {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]Counters, len(e.stats))
	for name, c := range e.stats {
		out[name] = *c
	}
	return out
}

// counters is the counters of policy, made on first use. Called with
// e.mu held.
func (e *Egress) counters(policy string) *Counters {
	c, ok := e.stats[policy]
	if !ok {
		if e.stats == nil {
			e.stats = map[string]*Counters{}
		}
		c = &Counters{}
		e.stats[policy] = c
	}
	return c
}

// Execution names the execution a Guard serves, and where its notices go.
type Execution struct {
	Tenant, ID string
	// Policy is the policy's name: one of Set's, or NameNone to refuse
	// every connection.
	Policy string
	// Notify, if set, is given a sentence for the person at the terminal
	// when a connection is refused, at most a few a second.
	Notify func(msg string)
}

// Listeners are the sockets in an execution's network that its Guard
// serves; each may be nil.
type Listeners struct {
	// Proxy speaks HTTP CONNECT, plain HTTP proxying and SOCKS5, for
	// programs that honour the proxy variables.
	Proxy net.Listener
	// Transparent take the connections the sandbox's redirect sends
	// there (sandbox.Redirect): every other TCP connection out.
	Transparent []net.Listener
	// DNS and DNSTCP are the sandbox's DNS server (FakeDNS), over UDP and
	// TCP: it answers the names the policy allows with addresses that
	// stand for them at the transparent listeners.
	DNS    net.PacketConn
	DNSTCP net.Listener
	// UDP take the datagrams the redirect sends there (sandbox.Redirect
	// UDP): every other UDP out, relayed a flow per program socket.
	UDP []PacketConn
}

// PacketConn is a UDP relay's socket, which tells where each datagram a
// redirect sent it was going: a *sandbox.RedirectedConn.
type PacketConn interface {
	ReadFromUDPAddrPort(b []byte) (int, netip.AddrPort, error)
	WriteToUDPAddrPort(b []byte, addr netip.AddrPort) (int, error)
	OriginalDst(from netip.AddrPort) (netip.AddrPort, error)
	Close() error
}

// Close closes every listener of ls.
func (ls Listeners) Close() {
	for _, c := range append([]net.Listener{ls.Proxy, ls.DNSTCP}, ls.Transparent...) {
		if c != nil {
			c.Close()
		}
	}
	if ls.DNS != nil {
		ls.DNS.Close()
	}
	for _, pc := range ls.UDP {
		pc.Close()
	}
}

// Serve starts serving x's listeners, in x's network, until the Guard is
// closed; they are closed with it.
func (e *Egress) Serve(x Execution, ls Listeners) (*Guard, error) {
	if err := e.known(x.Policy); err != nil {
		ls.Close()
		return nil, err
	}
	g := &Guard{e: e, x: x, policy: x.Policy, conns: map[net.Conn]Decision{}, tokens: noticeBurst, filled: time.Now()}
	g.dns = &FakeDNS{Policy: g.current, Done: g.resolved}
	g.srv = &proxy.Server{Dialer: g, Done: g.done, MaxConns: max(e.MaxConnsPerExecution, 0), Names: g.dns.Name}
	if g.srv.MaxConns == 0 {
		g.srv.MaxConns = DefaultMaxConnsPerExecution
	}
	if e.Dialer != nil && e.Dialer.Timeout > 0 {
		g.srv.DialTimeout = e.Dialer.Timeout + time.Second // the Dialer's own bound comes first
	}
	e.mu.Lock()
	if e.guards == nil {
		e.guards = map[*Guard]struct{}{}
	}
	e.guards[g] = struct{}{}
	e.mu.Unlock()
	if ls.Proxy != nil {
		go g.srv.Serve(ls.Proxy)
	}
	for _, l := range ls.Transparent {
		go g.srv.ServeTransparent(l)
	}
	if ls.DNS != nil {
		go g.dns.ServePacket(ls.DNS)
	}
	if ls.DNSTCP != nil {
		go g.dns.Serve(ls.DNSTCP)
	}
	for _, pc := range ls.UDP {
		go g.srv.ServeUDP(pc)
	}
	return g, nil
}

// Serving is the number of Guards serving now.
func (e *Egress) Serving() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.guards)
}

// known fails for a policy name the Set does not hold.
func (e *Egress) known(name string) error {
	if name == NameNone {
		return nil
	}
	if _, ok := e.Set.Lookup(name); !ok {
		return fmt.Errorf("netpolicy: no network policy %q on this server", name)
	}
	return nil
}

// acquire takes one of tenant's connections; false when it has
// MaxConnsPerTenant open.
func (e *Egress) acquire(tenant string) (int, bool) {
	limit := e.MaxConnsPerTenant
	if limit <= 0 {
		limit = DefaultMaxConnsPerTenant
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tenants[tenant] >= limit {
		return limit, false
	}
	if e.tenants == nil {
		e.tenants = map[string]int{}
	}
	e.tenants[tenant]++
	return limit, true
}

func (e *Egress) release(tenant string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tenants[tenant]--; e.tenants[tenant] <= 0 {
		delete(e.tenants, tenant)
	}
}

// A Guard is one execution's proxy: it asks the execution's policy, as it
// is when each connection is asked for, and counts what passes.
type Guard struct {
	e   *Egress
	x   Execution
	srv *proxy.Server
	dns *FakeDNS

	mu      sync.Mutex
	policy  string
	conns   map[net.Conn]Decision // made and not yet ended: what allowed each
	status  GuardStatus
	tokens  float64 // notices that may go now
	filled  time.Time
	unsaid  int // refusals not told since the last notice
	stopped bool
	// lastName and lastNameAt are the name the DNS server last refused:
	// a resolver asks for a name's A and AAAA, and again on a retry,
	// which is one refusal to the person at the terminal.
	lastName   string
	lastNameAt time.Time
}

// GuardStatus is a Guard's policy and counters.
type GuardStatus struct {
	Policy                   string
	Open                     int
	Allowed, Refused, Failed uint64
	Up, Down                 uint64
}

// Status is the Guard's policy and its counters so far.
func (g *Guard) Status() GuardStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.status
	s.Policy, s.Open = g.policy, len(g.conns)
	return s
}

// Policy is the Guard's policy name now.
func (g *Guard) Policy() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.policy
}

// SetPolicy changes the policy for the connections asked for from now
// on; those already made are kept.
func (g *Guard) SetPolicy(name string) error {
	if err := g.e.known(name); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.policy = name
	return nil
}

// Close stops the Guard: its listener and every connection through it
// are closed, and their ends reported.
func (g *Guard) Close() error {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
	err := errors.Join(g.srv.Close(), g.dns.Close())
	// Every connection's goroutine has ended: one still listed was made
	// as Close began, and the proxy closed it unrecorded. Its place in
	// the tenant's count is given back here.
	g.mu.Lock()
	left := len(g.conns)
	clear(g.conns)
	g.mu.Unlock()
	for range left {
		g.e.release(g.x.Tenant)
	}
	g.e.mu.Lock()
	delete(g.e.guards, g)
	g.e.mu.Unlock()
	return err
}

// current is the policy in force, nil for none.
func (g *Guard) current() *Policy {
	name := g.Policy()
	if name == NameNone {
		return nil
	}
	p, _ := g.e.Set.Lookup(name)
	return p
}

// resolved is the DNS server's report of a name it was asked: a refused
// one is told, observed and counted as a refused connection would be,
// once for the queries of one lookup (sameLookup).
func (g *Guard) resolved(d Decision) {
	if d.Allowed {
		return
	}
	g.mu.Lock()
	now := time.Now()
	again := d.Host == g.lastName && now.Sub(g.lastNameAt) < sameLookup
	g.lastName, g.lastNameAt = d.Host, now
	g.mu.Unlock()
	if again {
		return
	}
	if d.Policy == "" { // FakeDNS without a policy: the network is none
		d.Policy = g.Policy()
		d.Reason = noNetwork(d.Host, d.Policy)
	}
	g.refused(d)
}

// noNetwork is the reason of a refusal under network "none".
func noNetwork(target, policy string) string {
	return fmt.Sprintf("%s is refused: the execution's network is %q, which allows no connection", target, policy)
}

// Dial is the proxy's Dialer: the policy decides, the Egress's Dialer
// connects.
func (g *Guard) Dial(ctx context.Context, host string, port uint16) (net.Conn, error) {
	return g.dial(ctx, "tcp", host, port)
}

// DialUDP is Dial for a UDP flow the proxy relays: the policy's udp:
// rules decide.
func (g *Guard) DialUDP(ctx context.Context, host string, port uint16) (net.Conn, error) {
	return g.dial(ctx, "udp", host, port)
}

func (g *Guard) dial(ctx context.Context, network, host string, port uint16) (net.Conn, error) {
	name := g.Policy()
	p := g.current()
	if p == nil {
		d := Decision{Policy: name, Network: network, Host: host, Port: port}
		if a, err := netip.ParseAddr(host); err == nil {
			d.Host, d.Addr = "", a.Unmap()
		}
		return nil, g.refused(d.refuse("%s", noNetwork(d.target(), name)))
	}
	if limit, ok := g.e.acquire(g.x.Tenant); !ok {
		err := fmt.Errorf("netpolicy: tenant %q has %d connections open, the most it may", g.x.Tenant, limit)
		g.failed(Decision{Policy: name, Network: network, Host: host, Port: port}, err)
		return nil, &proxy.Refused{Reason: err.Error()}
	}
	c, dec, err := g.dialer().Dial(ctx, p, network, host, port)
	var refused *RefusedError
	switch {
	case errors.As(err, &refused):
		g.e.release(g.x.Tenant)
		return nil, g.refused(refused.Decision)
	case err != nil:
		g.e.release(g.x.Tenant)
		g.failed(dec, err)
		return nil, err
	}
	g.mu.Lock()
	g.conns[c] = dec
	g.status.Allowed++
	g.mu.Unlock()
	g.e.mu.Lock()
	g.e.counters(name).Allowed++
	g.e.mu.Unlock()
	g.observe(Event{Decision: dec})
	return c, nil
}

func (g *Guard) dialer() *Dialer {
	if g.e.Dialer == nil {
		return &Dialer{}
	}
	return g.e.Dialer
}

// refused counts, reports and tells a refusal, and is the proxy's error
// for it.
func (g *Guard) refused(d Decision) error {
	g.mu.Lock()
	g.status.Refused++
	msg := g.noticeLocked("network: " + d.Reason)
	g.mu.Unlock()
	g.e.mu.Lock()
	g.e.counters(d.Policy).Refused++
	g.e.mu.Unlock()
	g.observe(Event{Decision: d})
	if msg != "" && g.x.Notify != nil {
		g.x.Notify(msg)
	}
	return &proxy.Refused{Reason: d.Reason}
}

// Refuse is told of a connection the proxy refused without asking: it
// is counted, observed and told like one the policy refused.
func (g *Guard) Refuse(network, host string, port uint16, reason string) {
	d := Decision{Policy: g.Policy(), Network: network, Port: port, Reason: reason}
	if a, err := netip.ParseAddr(host); err == nil {
		d.Addr = a.Unmap()
	} else {
		d.Host = host
	}
	g.refused(d)
}

// failed counts and reports a connection that was neither refused nor
// made.
func (g *Guard) failed(d Decision, err error) { g.failedDropped(d, err, 0) }

// failedDropped is failed for a UDP flow that dropped bytes.
func (g *Guard) failedDropped(d Decision, err error, dropped int64) {
	g.mu.Lock()
	g.status.Failed++
	g.mu.Unlock()
	g.e.mu.Lock()
	g.e.counters(d.Policy).Failed++
	g.e.mu.Unlock()
	g.observe(Event{Decision: d, Err: err, Dropped: dropped})
}

// noticeLocked is msg when a notice may go now, with the refusals left
// unsaid before it; "" when it must wait. Called with g.mu held.
func (g *Guard) noticeLocked(msg string) string {
	now := time.Now()
	g.tokens = min(noticeBurst, g.tokens+float64(now.Sub(g.filled))/float64(noticeEvery))
	g.filled = now
	if g.tokens < 1 || g.stopped {
		g.unsaid++
		return ""
	}
	g.tokens--
	if g.unsaid > 0 {
		msg += " (" + strconv.Itoa(g.unsaid) + " more refused, not shown)"
		g.unsaid = 0
	}
	return msg
}

// done is the proxy's report of a connection: a made one's end, with its
// bytes. Refusals and failures were reported by Dial.
func (g *Guard) done(r proxy.Record) {
	network := "tcp"
	if r.Protocol == proxy.UDP {
		network = "udp"
	}
	if r.Target == nil {
		if r.Err != nil && r.Refused == "" && (r.Dropped > 0 || errors.Is(r.Err, proxy.ErrBusy) || errors.Is(r.Err, proxy.ErrClosed)) {
			g.failedDropped(Decision{Policy: g.Policy(), Network: network, Host: r.Host, Port: r.Port}, r.Err, r.Dropped)
		}
		return
	}
	g.mu.Lock()
	dec, ok := g.conns[r.Target]
	delete(g.conns, r.Target)
	g.status.Up += uint64(r.Up)
	g.status.Down += uint64(r.Down)
	g.mu.Unlock()
	if !ok {
		return
	}
	g.e.release(g.x.Tenant)
	g.e.mu.Lock()
	c := g.e.counters(dec.Policy)
	c.Up += uint64(r.Up)
	c.Down += uint64(r.Down)
	g.e.mu.Unlock()
	g.observe(Event{Protocol: string(r.Protocol), Decision: dec, Ended: true, Up: r.Up, Down: r.Down, Dropped: r.Dropped})
}

func (g *Guard) observe(ev Event) {
	if g.e.Observe == nil {
		return
	}
	ev.Tenant, ev.Execution = g.x.Tenant, g.x.ID
	g.e.Observe(ev)
}
