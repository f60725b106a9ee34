package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/termgate/termgate/gateway/cluster"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session"
)

// ClusterConfig makes the server one node of several. A nil
// Config.Cluster is a single node, as before.
type ClusterConfig struct {
	// Owner is this node: its name and the epoch of its state
	// (cluster.LoadIdentity). New execution IDs name it.
	Owner session.Owner
	// Members lists the nodes and their URLs. Required.
	Members *cluster.Membership
	// Signer signs the hops this node makes and verifies the ones it
	// gets. Required.
	Signer *cluster.Signer
	// DialTimeout bounds a TCP connect to a peer (default 1s).
	DialTimeout time.Duration
	// Timeout bounds a peer's response headers, a probe and the list
	// fan-out (default 2s).
	Timeout time.Duration
	// PingInterval is how often a relayed connection pings its upstream;
	// a pong missing this long ends it (default 5s).
	PingInterval time.Duration
	// Transport carries requests to peers; nil means
	// cluster.NewTransport(DialTimeout).
	Transport http.RoundTripper
}

// Cluster defaults.
const (
	DefaultPeerDialTimeout = time.Second
	DefaultPeerTimeout     = 2 * time.Second
	DefaultPeerPing        = 5 * time.Second
)

// router decides where a request for an execution is served: here, or on
// the node that owns it. It is nil on a single node.
type router struct {
	s   *Server
	cfg ClusterConfig
	rt  http.RoundTripper
}

// newRouter checks c and fills its defaults; NewServer sets its s.
func newRouter(c *ClusterConfig) (*router, error) {
	if c == nil {
		return nil, nil
	}
	if c.Members == nil || c.Signer == nil {
		return nil, errors.New("gateway: config: Cluster needs Members and Signer")
	}
	if !session.ValidNodeName(c.Owner.Node) || c.Members.Self() != c.Owner.Node || c.Signer.Self() != c.Owner.Node {
		return nil, fmt.Errorf("gateway: config: cluster node %q must be the Owner, the Members' and the Signer's self", c.Owner.Node)
	}
	cfg := *c
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultPeerDialTimeout
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultPeerTimeout
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = DefaultPeerPing
	}
	rt := cfg.Transport
	if rt == nil {
		rt = cluster.NewTransport(cfg.DialTimeout)
	}
	return &router{cfg: cfg, rt: cluster.WithHeaderTimeout(rt, cfg.Timeout)}, nil
}

// self is this node's name.
func (r *router) self() string { return r.cfg.Owner.Node }

// owner names the node that holds the execution id: the one a canonical
// ID names, or this node for a bare ID (a key of before cluster mode, or
// a malformed ID, which the local lookup answers as today).
func (r *router) owner(id string) string {
	o, _, canonical, err := session.ParseID(id)
	if err != nil || !canonical {
		return r.self()
	}
	return o.Node
}

// errUnavailable is a node that does not answer; the client retries after
// retryAfter.
type errUnavailable struct {
	node       string
	retryAfter time.Duration
	cause      error
}

func (e *errUnavailable) Error() string {
	return fmt.Sprintf("%s: node %s is not answering; retry in a few seconds", wire.CodeUnavailable, e.node)
}

func (e *errUnavailable) Unwrap() error { return e.cause }

// unavailable is the answer for a request whose owner does not answer;
// cause goes to the log only.
func (r *router) unavailable(node string, cause error) error {
	return &errUnavailable{node: node, retryAfter: time.Second, cause: cause}
}
