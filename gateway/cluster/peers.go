package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/termgate/termgate/session/execid"
)

// Defaults of DNSConfig.
const (
	DefaultRefresh = 10 * time.Second
	DefaultGrace   = 5 * time.Minute
)

// maxLookup bounds one SRV lookup: a resolver that never answers must not
// stall the refresh loop.
const maxLookup = 5 * time.Second

// DNSConfig configures a membership read from DNS SRV records, such as a
// Kubernetes headless Service's.
type DNSConfig struct {
	// Domain is the headless Service's name,
	// termgate-headless.default.svc.cluster.local. Members are the first
	// labels of the targets of _http._tcp.Domain (the Service's port must
	// be named http); a node's URL is scheme://NODE.Domain:Port.
	Domain string
	Port   int    // the nodes' port (1-65535)
	Scheme string // "http" or "https"; empty is http
	// Refresh is the time between lookups (DefaultRefresh); Grace how
	// long a name stays a member after it was last seen (DefaultGrace).
	Refresh, Grace time.Duration
	// LookupSRV resolves SRV records; nil is net.DefaultResolver's.
	LookupSRV func(ctx context.Context, service, proto, name string) (cname string, addrs []*net.SRV, err error)
	// Log receives refresh failures and member changes; nil discards.
	Log *slog.Logger
}

// Membership is the set of nodes this node works with and their base
// URLs. It is safe for concurrent use.
type Membership struct {
	self   string
	static map[string]*url.URL // nil with DNS
	dns    DNSConfig

	mu       sync.Mutex
	lastSeen map[string]time.Time // DNS: member -> when last seen
}

// NewStatic returns a fixed membership: self and the peers, name to base
// URL (http or https, a host, no path, query or user). peers may list
// self, whose URL is then only checked.
func NewStatic(self string, peers map[string]string) (*Membership, error) {
	if !execid.ValidNode(self) {
		return nil, fmt.Errorf("cluster: node name %q: want an RFC 1123 label (lower-case letters, digits, inner hyphens; at most 63)", self)
	}
	m := &Membership{self: self, static: make(map[string]*url.URL, len(peers))}
	for _, name := range slices.Sorted(maps.Keys(peers)) {
		if !execid.ValidNode(name) {
			return nil, fmt.Errorf("cluster: peer %q: want an RFC 1123 label (lower-case letters, digits, inner hyphens; at most 63)", name)
		}
		u, err := parseBaseURL(peers[name])
		if err != nil {
			return nil, fmt.Errorf("cluster: peer %s: %w", name, err)
		}
		m.static[name] = u
	}
	return m, nil
}

// parseBaseURL checks a peer's base URL: http or https, a host with an
// optional port, nothing else.
func parseBaseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("url %q: %w", s, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("url %q: want http or https", s)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("url %q: no host", s)
	case u.User != nil:
		return nil, fmt.Errorf("url %q: holds a user", s)
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "", u.Opaque != "":
		return nil, fmt.Errorf("url %q: want no path, query or fragment", s)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("url %q: bad port", s)
		}
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// NewDNS returns a membership read from the SRV records of c.Domain. Until
// Run's first lookup succeeds it holds self alone; URL answers for any
// node name from the start.
func NewDNS(self string, c DNSConfig) (*Membership, error) {
	if !execid.ValidNode(self) {
		return nil, fmt.Errorf("cluster: node name %q: want an RFC 1123 label (lower-case letters, digits, inner hyphens; at most 63)", self)
	}
	c.Domain = strings.TrimSuffix(strings.ToLower(c.Domain), ".")
	if c.Domain == "" || strings.Contains(c.Domain, "/") || strings.Contains(c.Domain, ":") {
		return nil, fmt.Errorf("cluster: peer domain %q: want a DNS name, such as termgate-headless.default.svc.cluster.local", c.Domain)
	}
	c.Scheme = cmp.Or(c.Scheme, "http")
	if c.Scheme != "http" && c.Scheme != "https" {
		return nil, fmt.Errorf("cluster: peer scheme %q: want http or https", c.Scheme)
	}
	if c.Port < 1 || c.Port > 65535 {
		return nil, fmt.Errorf("cluster: peer port %d: want 1-65535", c.Port)
	}
	if c.Refresh < 0 || c.Grace < 0 {
		return nil, errors.New("cluster: peer refresh and grace must not be negative")
	}
	c.Refresh, c.Grace = cmp.Or(c.Refresh, DefaultRefresh), cmp.Or(c.Grace, DefaultGrace)
	if c.LookupSRV == nil {
		c.LookupSRV = net.DefaultResolver.LookupSRV
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Membership{self: self, dns: c, lastSeen: map[string]time.Time{}}, nil
}

// Self returns this node's name.
func (m *Membership) Self() string { return m.self }

// URL returns node's base URL. A static membership knows its listed
// peers; a DNS one builds the URL of any valid name without a lookup. It
// reports false for an unknown or malformed name.
func (m *Membership) URL(node string) (*url.URL, bool) {
	if m.static != nil {
		u, ok := m.static[node]
		if !ok {
			return nil, false
		}
		c := *u
		return &c, true
	}
	if !execid.ValidNode(node) {
		return nil, false
	}
	return &url.URL{Scheme: m.dns.Scheme, Host: net.JoinHostPort(node+"."+m.dns.Domain, strconv.Itoa(m.dns.Port))}, true
}

// Members returns the member names, self included, sorted.
func (m *Membership) Members() []string {
	names := []string{m.self}
	if m.static != nil {
		for name := range m.static {
			names = append(names, name)
		}
	} else {
		m.mu.Lock()
		for name := range m.lastSeen {
			names = append(names, name)
		}
		m.mu.Unlock()
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Run refreshes a DNS membership every Refresh until ctx ends, logging
// failures and changes; a static one returns at once.
func (m *Membership) Run(ctx context.Context) {
	if m.static != nil {
		return
	}
	t := time.NewTicker(m.dns.Refresh)
	defer t.Stop()
	for {
		if err := m.Refresh(ctx); err != nil && ctx.Err() == nil {
			m.dns.Log.Warn("peer lookup failed; keeping the last member list", "domain", m.dns.Domain, "err", err, "members", m.Members())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Refresh looks the members up once: names seen now are members, names
// not seen for Grace are dropped, and a failed lookup changes nothing. A
// static membership has nothing to refresh.
func (m *Membership) Refresh(ctx context.Context) error {
	if m.static != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, min(m.dns.Refresh, maxLookup))
	defer cancel()
	_, srvs, err := m.dns.LookupSRV(ctx, "http", "tcp", m.dns.Domain)
	if err != nil {
		return fmt.Errorf("cluster: look up _http._tcp.%s: %w", m.dns.Domain, err)
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	added, removed := 0, 0
	for _, srv := range srvs {
		name, ok := m.memberName(srv.Target)
		if !ok || name == m.self {
			continue
		}
		if _, known := m.lastSeen[name]; !known {
			added++
		}
		m.lastSeen[name] = now
	}
	for name, seen := range m.lastSeen {
		if now.Sub(seen) > m.dns.Grace {
			delete(m.lastSeen, name)
			removed++
		}
	}
	if added > 0 || removed > 0 {
		m.dns.Log.Info("peer members changed", "domain", m.dns.Domain, "added", added, "removed", removed, "peers", len(m.lastSeen))
	}
	return nil
}

// memberName returns the node name an SRV target stands for: its first
// label, when the rest is the domain.
func (m *Membership) memberName(target string) (string, bool) {
	target = strings.TrimSuffix(strings.ToLower(target), ".")
	name, rest, ok := strings.Cut(target, ".")
	if !ok || rest != m.dns.Domain || !execid.ValidNode(name) {
		m.dns.Log.Debug("ignoring an SRV target outside the peer domain", "target", target, "domain", m.dns.Domain)
		return "", false
	}
	return name, true
}
