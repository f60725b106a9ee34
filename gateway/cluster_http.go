package gateway

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/termgate/termgate/gateway/audit"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/cluster"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session"
)

// apiExecution is an execution as the HTTP API answers it: session.Info
// and, on one node of several, the node that owns it (a routing hint).
type apiExecution struct {
	session.Info
	Node string `json:"node,omitempty"`
}

// execution is info as answered by this server.
func (a *httpAPI) execution(info session.Info) apiExecution {
	out := apiExecution{Info: info}
	if a.s.route != nil {
		out.Node = a.s.route.self()
	}
	return out
}

// apiList is the answer of GET /v1/executions.
type apiList struct {
	Executions []apiExecution `json:"executions"`
	wire.ListStatus
}

// verifyHop is route's first step: a request whose Termgate-Hop does not
// verify is answered 401 (false); one whose hop verifies comes back with
// the hop in its context. A single node ignores the header.
func (a *httpAPI) verifyHop(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	r2, err := a.s.route.verify(r)
	if err != nil {
		a.s.cfg.Audit.Refused(&audit.Record{Event: apiEventName(r), RemoteAddr: a.s.remoteAddr(r), Via: viaHTTP, Reason: authHop}, wire.CodeUnauthorized, nil)
		a.fail(w, r, auth.Claims{}, err)
		return r, false
	}
	return r2, true
}

// forward serves a request that names an execution owned by another
// node by proxying it whole to that node, and reports whether it did (or
// answered it: unavailable, gone, not found). A hop's request is served
// here, except one for an execution this node does not own, which is
// unavailable: a hop is never forwarded again. route calls it once the
// token and scope were checked, so a down node never shows to a client
// without a valid token.
func (a *httpAPI) forward(w http.ResponseWriter, r *http.Request, c auth.Claims) bool {
	return a.forwardFor(w, r, c, r.PathValue("id"), nil)
}

// forwardFor is forward for execution id, named elsewhere than in the
// path (an agent exec's body); body, when not nil, is the request's body,
// read already.
func (a *httpAPI) forwardFor(w http.ResponseWriter, r *http.Request, c auth.Claims, id string, body []byte) bool {
	rt := a.s.route
	if rt == nil || id == "" {
		return false
	}
	if _, hop := hopFrom(r.Context()); hop {
		o, _, canonical, err := session.ParseID(id)
		switch {
		case err != nil || !canonical:
			return false
		case o.Node == rt.self() && o.Epoch != rt.cfg.Owner.Epoch:
			a.fail(w, r, c, fmt.Errorf("%w: %s: this node restarted without its earlier state", session.ErrGone, id))
			return true
		case o.Node == rt.self():
			return false
		}
		a.failUnavailable(w, r, c, rt.unavailable(o.Node, errors.New("gateway: a hop for another node's execution")))
		return true
	}
	node, err := rt.owner(withToken(r.Context(), bearer(r)), c, id)
	if err == nil && node == rt.self() {
		return false
	}
	if err == nil {
		err = a.proxy(w, r, node, body)
	}
	if err != nil {
		a.failUnavailable(w, r, c, err)
	}
	return true
}

// bearer is r's bearer token as the client sent it.
func bearer(r *http.Request) string {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// failUnavailable is fail, with the Retry-After an unavailable answer
// advises.
func (a *httpAPI) failUnavailable(w http.ResponseWriter, r *http.Request, c auth.Claims, err error) {
	var u *errUnavailable
	if errors.As(err, &u) {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(time.Second, u.retryAfter).Round(time.Second)/time.Second)))
		err = &apiError{wire.CodeUnavailable, u.message()}
	}
	a.fail(w, r, c, err)
}

// proxy sends r whole to node as a hop (op local: served there) with the
// client's address and token, and copies the answer back as it comes
// (events long polls included: the header timeout grows by their wait).
// body, when set, replaces r's body (a start whose body was read here);
// otherwise r's body is read here first (relayBody), so the owner gets
// the whole request at once and the peer timeout measures the owner
// alone. It answers unavailable itself when node is marked down, fails to
// dial or sends no response headers in time; an error is returned only
// when nothing was written.
func (a *httpAPI) proxy(w http.ResponseWriter, r *http.Request, node string, body []byte) error {
	rt := a.s.route
	if rt.health.Down(node) {
		return rt.unavailable(node, errors.New("gateway: marked down after a recent failure"))
	}
	base, ok := rt.cfg.Members.URL(node)
	if !ok {
		return rt.unavailable(node, fmt.Errorf("gateway: %q is not a member", node))
	}
	// A file's bytes stream through, whatever their size: the owner
	// bounds them (its workspace quota) and times them (its idle body
	// timeout). Any other body is read here first.
	stream := body == nil && strings.Contains(r.Pattern, "/files/")
	if body == nil && !stream {
		var err error
		if body, err = a.relayBody(w, r); err != nil {
			return err
		}
	}
	addr := a.s.remoteAddr(r)
	ctx := r.Context()
	if _, wait, err := pollQuery(r.URL.Query()); err == nil && wait > 0 {
		ctx = cluster.ExtendHeaderTimeout(ctx, wait)
	}
	if wait := agentYield(r.Pattern, body); wait > 0 {
		ctx = cluster.ExtendHeaderTimeout(ctx, wait) // the owner answers when the wait ends
	}
	var failure error
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(base)
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del(cluster.HopHeader)
			if !stream {
				pr.Out.Body, pr.Out.ContentLength, pr.Out.TransferEncoding = nil, 0, nil
			}
			if len(body) > 0 {
				pr.Out.Body, pr.Out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			}
			pr.Out.Header.Del("Expect") // the body is here already
			rt.stampPolicies(pr.Out.Header)
			if err := rt.cfg.Signer.SignRequest(pr.Out, node, cluster.OpLocal, addr); err != nil {
				rt.s.log.Error("hop not signed", "node", node, "err", err) // the owner refuses it: 401
			}
		},
		Transport:      rt.rt,
		FlushInterval:  -1,
		ModifyResponse: func(*http.Response) error { rt.health.OK(node); return nil },
		ErrorHandler:   func(_ http.ResponseWriter, _ *http.Request, err error) { failure = err },
		ErrorLog:       slog.NewLogLogger(a.s.log.Handler(), slog.LevelDebug),
	}
	p.ServeHTTP(w, r.WithContext(ctx))
	if failure != nil {
		return rt.failed(node, failure) // a client's broken body is no peer failure (cluster.PeerFailed)
	}
	return nil
}

// relayBody reads the body of a request to be proxied to its owner: at
// most MaxMessageBytes (the most any request of the API takes) within
// RequestReadTimeout, as the owner itself would. A body that is too
// large, too slow or cut short fails its own request here (413, 408,
// 400) and never reaches the owner, whose health it says nothing about.
// No body is nil.
func (a *httpAPI) relayBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength == 0 {
		return nil, nil
	}
	var b []byte
	err := a.readWithin(w, func() error {
		var err error
		b, err = io.ReadAll(http.MaxBytesReader(w, r.Body, a.s.cfg.MaxMessageBytes))
		var tooLarge *http.MaxBytesError
		var ne net.Error
		if err != nil && !errors.As(err, &tooLarge) && !(errors.As(err, &ne) && ne.Timeout()) {
			return badRequest("the request body ended before its length")
		}
		return err
	})
	return b, err
}

// list answers the tenant's executions. On one node of several, it is
// every node's, merged oldest first: each other member is asked for its
// own list (a hop, op list) within Timeout, and those that did not answer
// are named in unreachable with partial set. A hop's list is this node's
// alone.
func (a *httpAPI) clusterList(r *http.Request, c auth.Claims, local []session.Info) apiList {
	out := apiList{Executions: make([]apiExecution, 0, len(local))}
	for _, info := range local {
		out.Executions = append(out.Executions, a.execution(info))
	}
	rt := a.s.route
	if rt == nil {
		return out
	}
	if _, hop := hopFrom(r.Context()); hop {
		return out
	}
	peers := rt.peers()
	ctx, cancel := context.WithTimeout(r.Context(), rt.cfg.Timeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, node := range peers {
		wg.Go(func() {
			list, err := rt.peerList(ctx, node, bearer(r), a.s.remoteAddr(r))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				out.Partial, out.Unreachable = true, append(out.Unreachable, node)
				return
			}
			out.Executions = append(out.Executions, list...)
		})
	}
	wg.Wait()
	slices.Sort(out.Unreachable)
	slices.SortStableFunc(out.Executions, func(x, y apiExecution) int {
		return cmp.Or(x.Started.Compare(y.Started), cmp.Compare(x.ID, y.ID))
	})
	return out
}

// peerList is node's own list of the client's executions.
func (r *router) peerList(ctx context.Context, node, token, addr string) ([]apiExecution, error) {
	status, b, err := r.peerGet(ctx, node, "/v1/executions", token, cluster.OpList, addr)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, r.unavailable(node, fmt.Errorf("gateway: list: status %d", status))
	}
	var list apiList
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, r.unavailable(node, fmt.Errorf("gateway: list: %w", err))
	}
	for i := range list.Executions {
		list.Executions[i].Node = cmp.Or(list.Executions[i].Node, node)
	}
	return list.Executions, nil
}
