package gateway

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/termgate/termgate/gateway/audit"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/internal/promtext"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/netpolicy"
	"github.com/termgate/termgate/session"
)

// The network scopes. A start or a change that names network policy NAME
// needs ScopeNetworkPrefix+NAME or ScopeNetworkAny; the host's network
// needs ScopeNetworkHost and a server that offers it
// (SandboxConfig.AllowHostNetwork). "none", and the server's default,
// need no scope.
const (
	ScopeNetworkPrefix = "net:"
	ScopeNetworkAny    = "net:*"
	ScopeNetworkHost   = "net:host"
)

// network is a start's network: the policy (session.Spec.Network) and the
// sandbox's network, from what the start asks for ("" for the server's
// default: SandboxConfig.NetworkPolicy, else SandboxConfig.Network). A
// name the server does not have is bad_request; the host's network on a
// server that does not offer it, forbidden.
func (s *Server) network(asked string) (string, sandbox.Network, error) {
	sb := s.cfg.Sandbox
	switch asked {
	case "":
		if sb.NetworkPolicy != "" {
			return sb.NetworkPolicy, sandbox.NetworkNone, nil
		}
		return "", sb.Network, nil
	case netpolicy.NameNone:
		return "", sandbox.NetworkNone, nil
	case netpolicy.NameHost:
		if !sb.AllowHostNetwork {
			return "", "", &apiError{wire.CodeForbidden, "this server does not offer the host's network (--network-allow-host)"}
		}
		return "", sandbox.NetworkHost, nil
	}
	if err := s.knownPolicy(asked); err != nil {
		return "", "", err
	}
	return asked, sandbox.NetworkNone, nil
}

// knownPolicy answers bad_request for a policy the server does not have.
func (s *Server) knownPolicy(name string) error {
	if err := netpolicy.ValidName(name); err != nil {
		return &apiError{wire.CodeBadRequest, fmt.Sprintf("network %q: %v", clip(name, 64), err)}
	}
	if s.cfg.Egress == nil {
		return &apiError{wire.CodeBadRequest, fmt.Sprintf("no network policy %q: this server has none", name)}
	}
	if _, ok := s.cfg.Egress.Set.Lookup(name); !ok {
		return &apiError{wire.CodeBadRequest, fmt.Sprintf("no network policy %q on this server", name)}
	}
	return nil
}

// mayUseNetwork is the scope check of a start or a change that names
// network asked: forbidden, with the scope it lacks, or "".
func mayUseNetwork(c auth.Claims, asked string) (code, msg string) {
	switch asked {
	case "", netpolicy.NameNone:
		return "", ""
	case netpolicy.NameHost:
		if !c.Has(ScopeNetworkHost) {
			return wire.CodeForbidden, "the token lacks the " + ScopeNetworkHost + " scope"
		}
		return "", ""
	}
	if !c.Has(ScopeNetworkPrefix+asked) && !c.Has(ScopeNetworkAny) {
		return wire.CodeForbidden, "the token lacks the " + ScopeNetworkPrefix + asked + " (or " + ScopeNetworkAny + ") scope"
	}
	return "", ""
}

// apiNetwork is the body of PUT /v1/executions/{id}/network.
type apiNetwork struct {
	Network string `json:"network"`
}

// apiNetworkStatus is the answer of GET and PUT
// /v1/executions/{id}/network.
type apiNetworkStatus struct {
	ID string `json:"id"`
	session.NetworkStatus
	// Kept says how the change treats connections already open.
	Kept string `json:"kept,omitempty"`
}

// getNetwork answers an execution's network policy and counters.
func (a *httpAPI) getNetwork(w http.ResponseWriter, r *http.Request, c auth.Claims) error {
	id := r.PathValue("id")
	st, err := a.s.cfg.Supervisor.Network(c.Tenant, id)
	if err != nil {
		return err
	}
	a.respond(w, http.StatusOK, apiNetworkStatus{ID: id, NetworkStatus: st})
	return nil
}

// putNetwork changes a running execution's network policy, for the
// connections asked for from now on.
func (a *httpAPI) putNetwork(w http.ResponseWriter, r *http.Request, c auth.Claims) error {
	var body apiNetwork
	if err := a.decodeBody(w, r, 4<<10, &body); err != nil {
		return err
	}
	id := r.PathValue("id")
	st, err := a.s.setNetwork(c, id, body.Network, func(rec *audit.Record) { *rec = *a.httpWho(r, c, eventNetwork) })
	if err != nil {
		return err
	}
	a.respond(w, http.StatusOK, apiNetworkStatus{ID: id, NetworkStatus: st, Kept: keptText})
	return nil
}

// keptText is what a change says of the connections already open.
const keptText = "connections opened before the change are kept; new ones follow the new policy"

// eventNetwork names a network change in the audit trail; eventConnect
// a connection a program asked for.
const (
	eventNetwork = "network"
	eventConnect = "connect"
)

// setNetwork checks and applies a change of id's network policy to name,
// recording it (who fills the record's common part) before it takes
// effect.
func (s *Server) setNetwork(c auth.Claims, id, name string, who func(*audit.Record)) (session.NetworkStatus, error) {
	if name == "" || name == netpolicy.NameHost {
		return session.NetworkStatus{}, &apiError{wire.CodeBadRequest, `network must name a policy, or "none": the host's network cannot be given to a running execution`}
	}
	if code, msg := mayUseNetwork(c, name); code != "" {
		return session.NetworkStatus{}, &apiError{code, msg}
	}
	if name != netpolicy.NameNone {
		if err := s.knownPolicy(name); err != nil {
			return session.NetworkStatus{}, err
		}
	}
	was, err := s.cfg.Supervisor.Network(c.Tenant, id)
	if err != nil {
		return session.NetworkStatus{}, err
	}
	if s.cfg.Audit != nil {
		rec := &audit.Record{}
		who(rec)
		rec.Execution, rec.Network, rec.Reason = id, name, "was "+was.Network
		if s.cfg.Audit.Record(rec) != nil {
			return session.NetworkStatus{}, errAuditRefused
		}
	}
	return s.cfg.Supervisor.SetNetwork(c.Tenant, id, name)
}

// AuditNetwork is an Egress's Observe that records the connections
// programs ask for in trail: a refusal (within the trail's refusal rate)
// with its reason and rule, a connection made with the rule that allowed
// it. Nil without a trail.
func AuditNetwork(trail *audit.Log) func(netpolicy.Event) {
	if trail == nil {
		return nil
	}
	return func(ev netpolicy.Event) { auditConnect(trail, ev) }
}

func auditConnect(trail *audit.Log, ev netpolicy.Event) {
	if ev.Ended {
		return
	}
	d := ev.Decision
	rec := &audit.Record{Event: eventConnect, Tenant: ev.Tenant, Execution: ev.Execution, Network: d.Policy,
		Host: d.Host, Port: d.Port, Rule: d.Rule}
	if d.Addr.IsValid() {
		rec.Address = d.Addr.String()
	}
	switch {
	case ev.Err != nil:
		rec.Reason = ev.Err.Error()
		trail.Refused(rec, wire.CodeUnavailable, nil)
	case !d.Allowed:
		rec.Reason = d.Reason
		trail.Refused(rec, wire.CodeForbidden, nil)
	default:
		trail.Record(rec) // the connection is made: a record that fails cannot undo it
	}
}

// policiesHeader carries the sending node's network policy digest on
// every hop, so that each node learns whether its peers enforce the same
// policies (the header is informative: the hop's signature does not
// cover it).
const policiesHeader = "Termgate-Network-Policies"

// policiesDigest is this server's network policy digest: its policies'
// names and rules (netpolicy.Set.Digest), that of no policy without any.
func (s *Server) policiesDigest() string {
	if s.cfg.Egress == nil {
		return (*netpolicy.Set)(nil).Digest()
	}
	return s.cfg.Egress.Set.Digest()
}

// stampPolicies puts this node's digest on a hop it sends.
func (r *router) stampPolicies(h http.Header) { h.Set(policiesHeader, r.s.policiesDigest()) }

// sawPolicies keeps the digest a peer's hop carried.
func (r *router) sawPolicies(node, digest string) {
	if digest == "" || len(digest) > 64 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.policies == nil {
		r.policies = map[string]string{}
	}
	r.policies[node] = digest
}

// differingPolicies is the peers whose last hop carried a digest other
// than this node's, sorted; nil on a single node.
func (r *router) differingPolicies() []string {
	if r == nil {
		return nil
	}
	own := r.s.policiesDigest()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for node, d := range r.policies {
		if d != own {
			out = append(out, node)
		}
	}
	slices.Sort(out)
	return out
}

// policiesReady is /readyz's network policy detail: this node's digest,
// and the peers seen enforcing other policies (a node is still ready:
// each enforces the policies it has for the executions it owns).
func (s *Server) policiesReady() string {
	d := s.policiesDigest()
	line := "network policies " + d[:12] + "\n"
	if differ := s.route.differingPolicies(); len(differ) > 0 {
		line += "network policies differ on " + strings.Join(differ, ", ") + "\n"
	}
	return line
}

// writeNetworkMetrics writes the network policies' families.
func (s *Server) writeNetworkMetrics(w *promtext.Writer) {
	w.Family("termgate_network_policies_info", "This node's network policies: 1, labelled with their digest (nodes with different digests enforce different policies).", promtext.Gauge)
	w.Sample("termgate_network_policies_info", 1, "digest", s.policiesDigest())
	w.One("termgate_network_policies_differing_peers", "Peers whose last hop carried a network policy digest other than this node's.", promtext.Gauge, float64(len(s.route.differingPolicies())))
	if s.cfg.Egress == nil {
		return
	}
	w.One("termgate_network_proxies", "Network policy proxies serving, one per running execution with a policy.", promtext.Gauge, float64(s.cfg.Egress.Serving()))
	stats := s.cfg.Egress.Stats()
	names := slices.Sorted(maps.Keys(stats))
	w.Family("termgate_network_connections_total", "Connections programs asked their network policy's proxy for, by policy and outcome (allowed, refused, failed: the target or a limit).", promtext.Counter)
	for _, name := range names {
		st := stats[name]
		w.Sample("termgate_network_connections_total", float64(st.Allowed), "outcome", "allowed", "policy", name)
		w.Sample("termgate_network_connections_total", float64(st.Failed), "outcome", "failed", "policy", name)
		w.Sample("termgate_network_connections_total", float64(st.Refused), "outcome", "refused", "policy", name)
	}
	w.Family("termgate_network_bytes_total", "Bytes through network policies' proxies, by policy and direction (up: to the target).", promtext.Counter)
	for _, name := range names {
		st := stats[name]
		w.Sample("termgate_network_bytes_total", float64(st.Down), "direction", "down", "policy", name)
		w.Sample("termgate_network_bytes_total", float64(st.Up), "direction", "up", "policy", name)
	}
}

// network changes the network policy of a writable channel's execution
// (the WebSocket's PUT /v1/executions/{id}/network), answered ok.
func (c *conn) network(req wire.Request) {
	ch, ok := c.writable(req, req.Channel)
	if !ok {
		return
	}
	_, err := c.s.setNetwork(c.currentClaims(), ch.execID, req.Network, func(rec *audit.Record) { *rec = *c.who(eventNetwork) })
	if errors.Is(err, errAuditRefused) {
		c.unavailable(req, ch.id)
		return
	}
	c.answer(req, ch.id, err)
}
