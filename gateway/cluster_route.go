package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/cluster"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/execid"
)

// ClusterConfig makes the server one node of several. A nil
// Config.Cluster is a single node, as before.
type ClusterConfig struct {
	// Owner is this node: its name and the epoch of its state
	// (cluster.LoadIdentity). New execution IDs name it.
	Owner execid.Owner
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

// Retry advice of an unavailable answer: a node that does not answer is
// tried again after unavailableRetry; after a peer said it restarts
// (close 1012), after restartRetry.
const (
	unavailableRetry = time.Second
	restartRetry     = 2 * time.Second
)

// authHop is the auth failure reason of a Termgate-Hop that does not
// verify (termgate_auth_failures_total, the audit trail).
const authHop = "hop"

// maxPeerAnswerBytes bounds a peer's answer to a locate, probe or list
// leg that this node reads itself (a list of many executions is the
// largest: ~300 bytes each).
const maxPeerAnswerBytes = 16 << 20

// router decides where a request for an execution is served: here, or on
// the node that owns it. It is nil on a single node; its methods that
// hooks call accept a nil router and then change nothing.
type router struct {
	s      *Server
	cfg    ClusterConfig
	health *cluster.Health
	rt     http.RoundTripper // to peers, response headers within cfg.Timeout

	mu       sync.Mutex
	policies map[string]string // each peer's network policy digest, as its last hop said (network.go)
}

// newRouter checks c and fills its defaults; NewServer sets its s.
func newRouter(c *ClusterConfig) (*router, error) {
	if c == nil {
		return nil, nil
	}
	if c.Members == nil || c.Signer == nil {
		return nil, errors.New("gateway: config: Cluster needs Members and Signer")
	}
	if !execid.ValidNode(c.Owner.Node) || c.Members.Self() != c.Owner.Node || c.Signer.Self() != c.Owner.Node {
		return nil, fmt.Errorf("gateway: config: cluster node %q must be the Owner, the Members' and the Signer's self", c.Owner.Node)
	}
	if !execid.ValidEpoch(c.Owner.Epoch) {
		return nil, fmt.Errorf("gateway: config: cluster epoch %q must be 6 of a-z and 2-7 (cluster.LoadIdentity)", c.Owner.Epoch)
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
	return &router{cfg: cfg, health: cluster.NewHealth(cluster.DefaultDownFor), rt: cluster.WithHeaderTimeout(rt, cfg.Timeout)}, nil
}

// self is this node's name.
func (r *router) self() string { return r.cfg.Owner.Node }

// A request's verified hop and its client's bearer token travel in its
// context.
type (
	hopKey   struct{}
	tokenKey struct{}
)

// withHop marks ctx as a verified hop's: served here, never routed again.
func withHop(ctx context.Context, h cluster.Hop) context.Context {
	return context.WithValue(ctx, hopKey{}, h)
}

// hopFrom returns the verified hop of a request's context, if any.
func hopFrom(ctx context.Context) (cluster.Hop, bool) {
	h, ok := ctx.Value(hopKey{}).(cluster.Hop)
	return h, ok
}

// withToken keeps the client's bearer token in ctx for the hops owner
// and placeStart make on its behalf: the peer verifies it again. The
// relay sets it from its connection's token before calling them.
func withToken(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, tokenKey{}, token)
}

func tokenFrom(ctx context.Context) string {
	t, _ := ctx.Value(tokenKey{}).(string)
	return t
}

// errBadHop answers a request whose Termgate-Hop does not verify: why is
// for the log only.
var errBadHop = &apiError{wire.CodeUnauthorized, "a valid bearer token is required"}

// verify checks r's Termgate-Hop: none leaves r as it is; a valid one
// returns r with the hop in its context (hopFrom), so it is served here
// and its client's address is the hop's; one that does not verify is
// errBadHop. A nil router (a single node) ignores the header: it has no
// secret to check it with, and routes nothing.
func (r *router) verify(req *http.Request) (*http.Request, error) {
	if r == nil {
		return req, nil
	}
	h, err := r.cfg.Signer.Verify(req)
	switch {
	case errors.Is(err, cluster.ErrNoHop):
		return req, nil
	case err != nil:
		r.s.metrics.authFailures.add(authHop, 1)
		r.s.log.Warn("hop refused", "remote_addr", req.RemoteAddr, "err", err)
		return req, errBadHop
	}
	r.sawPolicies(h.From, req.Header.Get(policiesHeader))
	return req.WithContext(withHop(req.Context(), h)), nil
}

// owner names the node that holds owner c's execution id, for a request
// that is not a hop's (a hop's is always served here):
//   - a canonical ID gives its node; one naming this node under another
//     epoch was made before this node lost its state: ErrGone;
//   - a bare ID this node holds (or remembers as gone) gives this node;
//   - another bare ID is located: a parallel hop GET to every other
//     member within Timeout, with the client's token (withToken); the
//     first that holds it wins, all saying not found is ErrNotFound, any
//     silence is unavailable;
//   - a malformed ID gives this node, whose lookup answers it as today.
func (r *router) owner(ctx context.Context, c auth.Claims, id string) (string, error) {
	o, _, canonical, err := session.ParseID(id)
	switch {
	case err != nil:
		return r.self(), nil
	case canonical && o.Node == r.self() && o.Epoch != r.cfg.Owner.Epoch:
		return "", fmt.Errorf("%w: %s: this node restarted without its earlier state", session.ErrGone, id)
	case canonical:
		return o.Node, nil
	}
	if _, err := r.s.cfg.Supervisor.Get(c.Tenant, id); err == nil || errors.Is(err, session.ErrGone) {
		return r.self(), nil
	}
	return r.locate(ctx, id)
}

// locate asks every other member whether it holds the bare ID id.
func (r *router) locate(ctx context.Context, id string) (string, error) {
	peers := r.peers()
	if len(peers) == 0 {
		return "", fmt.Errorf("%w: %s", session.ErrNotFound, id)
	}
	token := tokenFrom(ctx)
	if token == "" {
		r.s.log.Error("locate without the client's token", "execution", id)
		return "", r.unavailable(peers[0], errors.New("gateway: locate without a token"))
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	type answer struct {
		node   string
		status int
		err    error
	}
	answers := make(chan answer, len(peers))
	for _, node := range peers {
		go func() {
			status, _, err := r.peerGet(ctx, node, "/v1/executions/"+url.PathEscape(id), token, cluster.OpLocal, "")
			answers <- answer{node, status, err}
		}()
	}
	var silent, gone string
	for range peers {
		a := <-answers
		switch {
		case a.err == nil && a.status == http.StatusOK:
			return a.node, nil // the others end with ctx; answers is buffered
		case a.err == nil && a.status == http.StatusGone:
			gone = a.node
		case a.err != nil || a.status != http.StatusNotFound:
			silent = a.node
		}
	}
	switch {
	case gone != "":
		return gone, nil // it says gone itself
	case silent != "":
		return "", r.unavailable(silent, errors.New("gateway: locate: no answer"))
	}
	return "", fmt.Errorf("%w: %s", session.ErrNotFound, id)
}

// peers are the members other than this node.
func (r *router) peers() []string {
	var out []string
	for _, m := range r.cfg.Members.Members() {
		if m != r.self() {
			out = append(out, m)
		}
	}
	return out
}

// peerURL is node's URL for path (with its query).
func (r *router) peerURL(node, path string) (*url.URL, error) {
	base, ok := r.cfg.Members.URL(node)
	if !ok {
		return nil, r.unavailable(node, fmt.Errorf("gateway: %q is not a member", node))
	}
	u, err := base.Parse(path)
	if err != nil {
		return nil, fmt.Errorf("gateway: peer URL %q: %w", path, err)
	}
	return u, nil
}

// peerDo sends a hop request asking op of node, with the client's token,
// and returns its status and at most maxPeerAnswerBytes of its body. A
// node marked down is not dialled, except by a keyed start's probe: a
// holder back from a restart is marked down for a moment yet, and a
// probe skipped would make a second execution for a key it answers for
// (the guarantee of PROTOCOL.md's keyed start). A failed dial or a header
// timeout marks a node down.
func (r *router) peerDo(ctx context.Context, method, node, path, token, op, addr string, body []byte) (int, []byte, error) {
	if op != cluster.OpProbe && r.health.Down(node) {
		return 0, nil, r.unavailable(node, errors.New("gateway: marked down after a recent failure"))
	}
	u, err := r.peerURL(node, path)
	if err != nil {
		return 0, nil, err
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return 0, nil, fmt.Errorf("gateway: hop request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	r.stampPolicies(req.Header)
	if err := r.cfg.Signer.SignRequest(req, node, op, addr); err != nil {
		return 0, nil, fmt.Errorf("gateway: hop request: %w", err)
	}
	resp, err := r.rt.RoundTrip(req)
	if err != nil {
		return 0, nil, r.failed(node, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerAnswerBytes+1))
	if err != nil || len(b) > maxPeerAnswerBytes {
		return 0, nil, r.unavailable(node, fmt.Errorf("gateway: hop answer: %d bytes, %v", len(b), err))
	}
	r.health.OK(node)
	return resp.StatusCode, b, nil
}

// peerGet is peerDo for a GET.
func (r *router) peerGet(ctx context.Context, node, path, token, op, addr string) (int, []byte, error) {
	return r.peerDo(ctx, http.MethodGet, node, path, token, op, addr, nil)
}

// failed is the unavailable answer for a request to node that failed
// with err. It marks node down only for the peer's own failures
// (cluster.PeerFailed: no connection, or no response headers in time
// after the whole request was sent), never for what a client can bring
// about: a body that comes slowly or breaks off, a client that leaves, a
// fan-out that was answered.
func (r *router) failed(node string, err error) error {
	if cluster.PeerFailed(err) {
		r.health.Fail(node)
	}
	return r.unavailable(node, err)
}

// errUnavailable is a node that does not answer; the client retries after
// retryAfter.
type errUnavailable struct {
	node       string
	retryAfter time.Duration
	cause      error
}

func (e *errUnavailable) Error() string {
	return fmt.Sprintf("%s: %s", wire.CodeUnavailable, e.message())
}

// message is the text a client is shown.
func (e *errUnavailable) message() string {
	return fmt.Sprintf("node %s is not answering; retry in a few seconds", e.node)
}

func (e *errUnavailable) Unwrap() error { return e.cause }

// RetryMS is the retry advice in milliseconds (wire.Message.RetryMS).
func (e *errUnavailable) RetryMS() int64 { return e.retryAfter.Milliseconds() }

// unavailable is the answer for a request whose owner does not answer;
// cause goes to the log only.
func (r *router) unavailable(node string, cause error) error {
	r.s.log.Info("peer unavailable", "node", node, "err", cause)
	return &errUnavailable{node: node, retryAfter: unavailableRetry, cause: cause}
}

// dialUpstream opens a WebSocket to node's /v1/connect for a client at
// addr with its token, as a hop (op local: the node serves every request
// on it itself), within DialTimeout plus Timeout, and reads its hello,
// which must state protocol 1. Every failure is unavailable (*errUnavailable,
// its RetryMS the advice); node is marked down after a failed dial or
// when the handshake's response headers do not come in time. The
// connection outlives ctx; the caller closes it.
func (r *router) dialUpstream(ctx context.Context, node, token, addr string) (*websocket.Conn, error) {
	if r.health.Down(node) {
		return nil, r.unavailable(node, errors.New("gateway: marked down after a recent failure"))
	}
	u, err := r.peerURL(node, "/v1/connect")
	if err != nil {
		return nil, err
	}
	h := http.Header{"Authorization": {"Bearer " + token}}
	r.stampPolicies(h)
	if err := r.cfg.Signer.Sign(h, http.MethodGet, u.RequestURI(), node, cluster.OpLocal, addr); err != nil {
		return nil, fmt.Errorf("gateway: dial upstream: %w", err)
	}
	dctx, cancel := context.WithTimeout(ctx, r.cfg.DialTimeout+r.cfg.Timeout)
	defer cancel()
	ws, resp, err := websocket.Dial(dctx, u.String(), &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: r.rt}, HTTPHeader: h, Subprotocols: []string{wire.Subprotocol},
	})
	if err != nil {
		if resp != nil { // it answered, and refused: not down
			return nil, r.unavailable(node, fmt.Errorf("gateway: dial upstream: status %d: %w", resp.StatusCode, err))
		}
		return nil, r.failed(node, err)
	}
	ws.SetReadLimit(maxPeerAnswerBytes) // the owner's frames: output, snapshots
	if err := readHello(dctx, ws); err != nil {
		ws.CloseNow()
		return nil, r.failed(node, err)
	}
	r.health.OK(node)
	return ws, nil
}

// readHello reads an upstream's first message, which must be a hello of
// protocol 1.
func readHello(ctx context.Context, ws *websocket.Conn) error {
	typ, b, err := ws.Read(ctx)
	if err != nil {
		return fmt.Errorf("gateway: upstream hello: %w", err)
	}
	var m wire.Message
	if typ != websocket.MessageText || json.Unmarshal(b, &m) != nil || m.Type != wire.MsgHello {
		return errors.New("gateway: upstream sent no hello")
	}
	if m.Protocol != wire.ProtocolVersion {
		return fmt.Errorf("gateway: upstream speaks protocol %d, this node %d", m.Protocol, wire.ProtocolVersion)
	}
	return nil
}
