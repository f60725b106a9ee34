package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/termgate/termgate/gateway"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/cluster"
	"github.com/termgate/termgate/session/execid"
)

// Many nodes: with --node, serve is one node of several behind a load
// balancer. New execution IDs name it (NODE.EPOCH~KEY), and a request for
// an execution another node owns is proxied there with a hop signed by
// the shared node secret (gateway/cluster_route.go, gateway/cluster).

// clusterOptions are serve's flags of cluster mode.
type clusterOptions struct {
	node        string
	peers       []string // NAME=URL
	peerDNS     string
	peerPort    int // 0: --listen's port
	peerScheme  string
	secretFiles []string // the first signs, all verify
	dialTimeout time.Duration
	timeout     time.Duration
	ping        time.Duration
}

// Bounds of the cluster durations: a peer that takes longer than a minute
// to connect or answer is down, and pings below 50 ms are a load of their
// own.
const (
	maxPeerTimeout = time.Minute
	minPeerPing    = 50 * time.Millisecond
	maxPeerPing    = 5 * time.Minute
)

// sigterm values: what SIGTERM does to serve.
const (
	sigtermRestart  = "restart"
	sigtermShutdown = "shutdown"
)

// peerPortFlag parses --peer-port.
func peerPortFlag(dst *int) func(string) error {
	return func(s string) error {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > 65535 {
			return fmt.Errorf("want a port between 1 and 65535, got %q", s)
		}
		*dst = v
		return nil
	}
}

// check refuses a cluster configuration that cannot work, naming the flag;
// listen is --listen, whose port --peer-dns uses unless --peer-port says.
func (c *clusterOptions) check(listen string) error {
	if c.node == "" {
		if len(c.peers) > 0 || c.peerDNS != "" || len(c.secretFiles) > 0 {
			return errors.New("serve: --peer, --peer-dns and --node-secret-file need --node (this node's name)")
		}
		return nil
	}
	switch {
	case !execid.ValidNode(c.node):
		return fmt.Errorf("serve: --node %q: want an RFC 1123 label: lower-case letters, digits and inner hyphens, at most 63 (a StatefulSet pod's name is one)", c.node)
	case len(c.peers) > 0 && c.peerDNS != "":
		return errors.New("serve: --peer and --peer-dns exclude each other: list the peers, or name the headless Service that lists them")
	case c.peerDNS == "" && (c.peerPort != 0 || c.peerScheme != ""):
		return errors.New("serve: --peer-port and --peer-scheme go with --peer-dns (a --peer URL holds its own)")
	case len(c.secretFiles) == 0:
		return errors.New("serve: --node needs --node-secret-file: the secret shared by every node, which signs the hops between them")
	case c.dialTimeout <= 0 || c.dialTimeout > maxPeerTimeout || c.timeout <= 0 || c.timeout > maxPeerTimeout:
		return fmt.Errorf("serve: --peer-dial-timeout and --peer-timeout: want more than 0 and at most %v", maxPeerTimeout)
	case c.ping < minPeerPing || c.ping > maxPeerPing:
		return fmt.Errorf("serve: --peer-ping %v: want %v to %v", c.ping, minPeerPing, durationText(maxPeerPing))
	}
	_, _, err := c.membership(listen, nil)
	return err
}

// membership builds the member list the flags give: static with --peer,
// from DNS with --peer-dns, else this node alone. source names which, for
// the log.
func (c *clusterOptions) membership(listen string, log *slog.Logger) (m *cluster.Membership, source string, err error) {
	if c.peerDNS == "" {
		peers, err := parsePeers(c.peers)
		if err != nil {
			return nil, "", err
		}
		m, err := cluster.NewStatic(c.node, peers)
		if err != nil {
			return nil, "", fmt.Errorf("serve: --peer: %w", err)
		}
		if len(peers) == 0 {
			return m, "none", nil
		}
		return m, "static", nil
	}
	port := c.peerPort
	if port == 0 {
		if port, err = listenPort(listen); err != nil {
			return nil, "", err
		}
	}
	m, err = cluster.NewDNS(c.node, cluster.DNSConfig{Domain: c.peerDNS, Port: port, Scheme: c.peerScheme, Log: log})
	if err != nil {
		return nil, "", fmt.Errorf("serve: --peer-dns: %w", err)
	}
	return m, "dns", nil
}

// parsePeers reads --peer NAME=URL entries; a name given twice is an
// error, not the last one winning.
func parsePeers(list []string) (map[string]string, error) {
	peers := make(map[string]string, len(list))
	for _, p := range list {
		name, u, ok := strings.Cut(p, "=")
		if !ok || name == "" || u == "" {
			return nil, fmt.Errorf("serve: --peer %q: want NAME=URL, such as termgate-1=http://10.0.0.2:8080", p)
		}
		if _, dup := peers[name]; dup {
			return nil, fmt.Errorf("serve: --peer: %s is listed twice", name)
		}
		peers[name] = u
	}
	return peers, nil
}

// listenPort is --listen's port, the peers' by default with --peer-dns.
func listenPort(listen string) (int, error) {
	_, p, err := net.SplitHostPort(listen)
	n, perr := strconv.Atoi(p)
	if err != nil || perr != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("serve: --peer-dns: the peers' port is --listen's, and %q names none: give --peer-port", listen)
	}
	return n, nil
}

// buildCluster makes serve's cluster configuration from the flags: nil
// without --node. It reads the node secrets, loads (or creates) the
// node's epoch in the state directory, refusing one another node made,
// and logs the node, epoch and members. run refreshes a DNS membership
// until its context ends; serve owns it.
func buildCluster(o *serveOptions, log *slog.Logger) (cfg *gateway.ClusterConfig, run func(context.Context), err error) {
	c := &o.cluster
	if c.node == "" {
		return nil, func(context.Context) {}, nil
	}
	var secrets [][]byte
	for _, path := range c.secretFiles {
		b, err := auth.ReadSecretFile(path)
		if err != nil {
			return nil, nil, fmt.Errorf("serve: --node-secret-file: %w", err)
		}
		secrets = append(secrets, b)
	}
	signer, err := cluster.NewSigner(c.node, secrets...)
	if err != nil {
		return nil, nil, fmt.Errorf("serve: --node-secret-file: %w", err)
	}
	members, source, err := c.membership(o.listen, log)
	if err != nil {
		return nil, nil, err
	}
	epoch, err := cluster.LoadIdentity(o.stateDir, c.node)
	if err != nil {
		return nil, nil, fmt.Errorf("serve: refusing to start: --node %s: %w", c.node, err)
	}
	cfg = &gateway.ClusterConfig{
		Owner: execid.Owner{Node: c.node, Epoch: epoch}, Members: members, Signer: signer,
		DialTimeout: c.dialTimeout, Timeout: c.timeout, PingInterval: c.ping,
	}
	// Every node must list the same members (a keyed start's guarantee
	// holds only then): the log shows them, to compare.
	log.Info("cluster", "node", c.node, "epoch", epoch, "members", members.Members(), "peer_source", source,
		"peer_dns", c.peerDNS, "node_secrets", len(secrets), "peer_dial_timeout", durationText(c.dialTimeout),
		"peer_timeout", durationText(c.timeout), "peer_ping", durationText(c.ping))
	return cfg, members.Run, nil
}
