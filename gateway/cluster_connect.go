package gateway

import (
	"log/slog"
	"net/http"
	"net/http/httputil"

	"github.com/termgate/termgate/gateway/cluster"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session/execid"
)

// proxyConnect serves a /v1/connect whose ?node= names another member
// (a routing hint: a bad or unknown name is ignored) by proxying the
// whole connection to that node, as a hop, once the client's token was
// verified here. It returns false when the connection is to be served
// here: no hint, a hint naming this node, a hop's connection (served here
// always), a node marked down, or one whose dial or response headers
// failed before anything was written: the hint never adds a failure, the
// relay then answers per request. Only the peer's own failures
// (cluster.PeerFailed) mark it down.
func (r *router) proxyConnect(w http.ResponseWriter, req *http.Request) bool {
	if r == nil {
		return false
	}
	node := req.URL.Query().Get("node")
	if _, hop := hopFrom(req.Context()); hop || node == "" || node == r.self() || !execid.ValidNode(node) || r.health.Down(node) {
		return false
	}
	base, ok := r.cfg.Members.URL(node)
	if !ok {
		return false
	}
	addr := r.s.remoteAddr(req)
	var dialFailed error
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(base)
			pr.Out.Host = pr.In.Host // the owner checks Origin against the host the client used
			pr.Out.Header.Del(cluster.HopHeader)
			// A handshake has no body; one sent with it stays here, so
			// its pace never counts against the owner's header timeout.
			pr.Out.Body, pr.Out.ContentLength, pr.Out.TransferEncoding = nil, 0, nil
			r.stampPolicies(pr.Out.Header)
			if err := r.cfg.Signer.SignRequest(pr.Out, node, cluster.OpLocal, addr); err != nil {
				r.s.log.Error("hop not signed", "node", node, "err", err) // the owner refuses it: 401
			}
		},
		Transport:     r.rt,
		FlushInterval: -1,
		ErrorHandler:  func(_ http.ResponseWriter, _ *http.Request, err error) { dialFailed = err },
		ErrorLog:      slog.NewLogLogger(r.s.log.Handler(), slog.LevelDebug),
	}
	p.ServeHTTP(w, req)
	if dialFailed == nil {
		r.health.OK(node)
		return true
	}
	if !cluster.PeerFailed(dialFailed) {
		if req.Context().Err() != nil {
			return true // the client left
		}
		r.s.log.Info("connection hint not followed; serving here", "node", node, "remote_addr", addr, "err", dialFailed)
		return false
	}
	r.health.Fail(node)
	r.s.log.Info("connection hint not followed; serving here", "node", node, "remote_addr", addr, "err", dialFailed)
	return false
}

// connectHop is connect's first step: a handshake whose Termgate-Hop does
// not verify is answered 401 (false), as a refused token is; one whose hop
// verifies comes back with the hop in its context, so its connection is
// served here only and its client's address is the hop's.
func (r *router) connectHop(w http.ResponseWriter, req *http.Request) (*http.Request, bool) {
	req2, err := r.verify(req)
	if err != nil {
		r.s.auditConnect(req, "", "", wire.CodeUnauthorized, authHop)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return req, false
	}
	return req2, true
}
