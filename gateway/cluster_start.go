package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/cluster"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/execid"
)

// startPlan is where a start runs: on Node, as the execution ID, which is
// what the start passes on (canonical, or a bare key an execution made
// before cluster mode holds).
type startPlan struct {
	Node string
	ID   string
}

// placeStart decides where owner c's start req runs (PROTOCOL.md,
// "Nodes", keyed start):
//  1. no id: here, under a new canonical ID;
//  2. a canonical id: the node it names (one naming this node under
//     another epoch is ErrGone); a bare key on a hop's request: here (the
//     front already placed it), canonical unless an execution from before
//     cluster mode holds the bare key;
//  3. a bare key: the top two of cluster.Rank, H and A, are asked in
//     parallel within Timeout whether they hold it (Supervisor.Existing
//     here, a hop POST with op probe there), never creating it;
//  4. one that holds it, or holds the key under another spec (conflict),
//     is the answer;
//  5. both saying no: H; H saying no and A silent: H; H silent and A
//     saying no: A; both silent: unavailable.
//
// body is the start as the HTTP API's JSON (nil: made from req), sent to
// the peers probed; ctx carries the client's token (withToken) for them.
func (r *router) placeStart(ctx context.Context, c auth.Claims, req wire.Request, body []byte) (startPlan, error) {
	self := startPlan{Node: r.self(), ID: req.ID}
	if req.ID == "" {
		self.ID = execid.Canonical(r.cfg.Owner, execid.New())
		return self, nil
	}
	o, key, canonical, err := session.ParseID(req.ID)
	_, hop := hopFrom(ctx)
	switch {
	case err != nil:
		return startPlan{}, err
	case canonical && o.Node == r.self() && o.Epoch != r.cfg.Owner.Epoch:
		return startPlan{}, fmt.Errorf("%w: %s: this node restarted without its earlier state", session.ErrGone, req.ID)
	case canonical && hop && o.Node != r.self():
		return startPlan{}, r.unavailable(o.Node, errors.New("gateway: a hop for another node's start"))
	case canonical:
		return startPlan{Node: o.Node, ID: req.ID}, nil
	case hop:
		if _, err := r.s.cfg.Supervisor.Get(c.Tenant, key); err != nil {
			self.ID = execid.Canonical(r.cfg.Owner, key) // no execution from before cluster mode has it
		}
		return self, nil
	}
	spec, err := r.s.spec(c.Tenant, req)
	if err != nil {
		return startPlan{}, err
	}
	if body == nil {
		if body, err = json.Marshal(apiStartOf(req)); err != nil {
			return startPlan{}, fmt.Errorf("gateway: probe body: %w", err)
		}
	}
	return r.placeKey(ctx, c, key, spec, body)
}

// probe is a candidate's answer to "do you hold this key?".
type probe struct {
	node   string
	id     string // the execution's ID when it holds it
	found  bool
	err    error // ErrConflict; or why it did not answer (silent)
	silent bool
}

// placeKey is placeStart's steps 3 to 5 for a bare key.
func (r *router) placeKey(ctx context.Context, c auth.Claims, key string, spec session.Spec, body []byte) (startPlan, error) {
	ranked := cluster.Rank(c.Tenant, key, r.cfg.Members.Members())
	cands := ranked[:min(2, len(ranked))]
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	answers := make([]probe, len(cands))
	done := make(chan struct{}, len(cands))
	for i, node := range cands {
		go func() {
			if node == r.self() {
				answers[i] = r.probeHere(c.Tenant, key, spec)
			} else {
				answers[i] = r.probePeer(ctx, node, body)
			}
			done <- struct{}{}
		}()
	}
	for range cands {
		<-done
	}
	for _, a := range answers {
		switch {
		case a.found:
			return startPlan{Node: a.node, ID: a.id}, nil
		case a.err != nil && !a.silent:
			return startPlan{}, a.err // a conflict, or the spec refused
		}
	}
	for _, a := range answers { // H first, then A
		if !a.silent {
			return startPlan{Node: a.node, ID: r.canonical(a.node, key)}, nil
		}
	}
	return startPlan{}, answers[0].err
}

// canonical is key's ID on node. Another node's epoch is not known here:
// its ID is the bare key, which that node's hop start (step 2) then keeps
// as it is, so the peer answers it with the ID it makes.
func (r *router) canonical(node, key string) string {
	if node == r.self() {
		return execid.Canonical(r.cfg.Owner, key)
	}
	return key
}

// probeHere asks this node's supervisor: the key's canonical ID, then the
// bare key (an execution from before cluster mode).
func (r *router) probeHere(tenant, key string, spec session.Spec) probe {
	sup := r.s.cfg.Supervisor
	for _, id := range []string{execid.Canonical(r.cfg.Owner, key), key} {
		info, err := sup.Existing(tenant, id, spec)
		switch {
		case err == nil:
			return probe{node: r.self(), id: info.ID, found: true}
		case !errors.Is(err, session.ErrNotFound) && !errors.Is(err, session.ErrGone):
			return probe{node: r.self(), err: err}
		}
	}
	return probe{node: r.self()}
}

// probePeer asks node with a hop POST /v1/executions, op probe.
func (r *router) probePeer(ctx context.Context, node string, body []byte) probe {
	status, b, err := r.peerDo(ctx, http.MethodPost, node, "/v1/executions", tokenFrom(ctx), cluster.OpProbe, "", body)
	switch {
	case err != nil:
		return probe{node: node, err: err, silent: true}
	case status == http.StatusNotFound:
		return probe{node: node}
	case status == http.StatusConflict:
		return probe{node: node, err: fmt.Errorf("%w: the key is held with another spec", session.ErrConflict)}
	case status != http.StatusOK:
		return probe{node: node, err: r.unavailable(node, fmt.Errorf("gateway: probe: status %d", status)), silent: true}
	}
	var e apiExecution
	if err := json.Unmarshal(b, &e); err != nil || e.ID == "" {
		return probe{node: node, err: r.unavailable(node, fmt.Errorf("gateway: probe answer: %v", err)), silent: true}
	}
	return probe{node: node, id: e.ID, found: true}
}

// apiStartOf is req as the HTTP API's start body.
func apiStartOf(req wire.Request) apiStart {
	return apiStart{
		ID: req.ID, Command: req.Command, Args: req.Args, Env: req.Env, Cwd: req.Cwd, PTY: req.PTY,
		TimeoutMS: req.TimeoutMS, IdleTimeoutMS: req.IdleTimeoutMS, Interactive: req.Interactive,
		Flow: req.Flow, HoldMS: req.HoldMS, Limits: req.Limits, Record: req.Record, RecordInput: req.RecordInput,
		Network: req.Network, WorkspaceReadOnly: req.WorkspaceReadOnly, Mounts: req.Mounts, Proc: req.Proc,
		MaxOutputBytes: req.MaxOutputBytes, RetentionMS: req.RetentionMS,
	}
}

// placed is the HTTP starts' routing (a hook in start and in the agent
// exec, after the body was read): a hop's probe is answered here; a start
// placed on another node is proxied there with the ID it was given, in
// the body resend makes of it; one placed here comes back with req.ID
// set, to be started here (false).
func (a *httpAPI) placed(w http.ResponseWriter, r *http.Request, c auth.Claims, req *wire.Request, resend func(wire.Request) any) bool {
	rt := a.s.route
	if rt == nil {
		return false
	}
	if h, hop := hopFrom(r.Context()); hop && h.Op == cluster.OpProbe {
		a.answerProbe(w, r, c, *req)
		return true
	}
	plan, err := rt.placeStart(withToken(r.Context(), bearer(r)), c, *req, nil)
	if err != nil {
		a.failUnavailable(w, r, c, err)
		return true
	}
	req.ID = plan.ID
	if plan.Node == rt.self() {
		return false
	}
	b, err := json.Marshal(resend(*req))
	if err == nil {
		r.Header.Set("Content-Type", "application/json")
		err = a.proxy(w, r, plan.Node, b)
	}
	if err != nil {
		a.failUnavailable(w, r, c, err)
	}
	return true
}

// answerProbe answers a front's probe: 200 and the execution when this
// node holds the key as the spec would make it, 409 when under another
// spec, 404 when not. It never creates one.
func (a *httpAPI) answerProbe(w http.ResponseWriter, r *http.Request, c auth.Claims, req wire.Request) {
	_, key, canonical, err := session.ParseID(req.ID)
	if err == nil && canonical {
		err = fmt.Errorf("%w: a probe names a bare key", session.ErrInvalidID)
	}
	var spec session.Spec
	if err == nil {
		spec, err = a.s.spec(c.Tenant, req)
	}
	if err != nil {
		a.fail(w, r, c, err)
		return
	}
	p := a.s.route.probeHere(c.Tenant, key, spec)
	switch {
	case p.found:
		info, err := a.s.cfg.Supervisor.Get(c.Tenant, p.id)
		if err != nil {
			a.fail(w, r, c, err)
			return
		}
		a.respond(w, http.StatusOK, a.execution(info))
	case p.err != nil:
		a.fail(w, r, c, p.err)
	default:
		a.fail(w, r, c, fmt.Errorf("%w: %s", session.ErrNotFound, key))
	}
}
