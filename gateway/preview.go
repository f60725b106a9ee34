package gateway

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/cluster"
	"github.com/termgate/termgate/gateway/wire"
)

// Previews' bounds.
const (
	// DefaultPreviewTTL is a preview's life when its request names none;
	// MaxPreviewTTL the longest it may ask for.
	DefaultPreviewTTL = time.Hour
	MaxPreviewTTL     = 24 * time.Hour
	// MaxPreviewsPerTenant and MaxPreviews bound the previews alive at
	// once; a request beyond is answered capacity.
	MaxPreviewsPerTenant = 64
	MaxPreviews          = 4096
	// previewCookie carries a preview's secret after the first visit.
	previewCookie = "termgate_preview"
	// previewPath prefixes path-based previews.
	previewPath = "/v1/preview/"
)

// Audit event of a preview made or revoked.
const (
	eventPreview       = "preview"
	eventPreviewRevoke = "preview-revoke"
)

// previews are the HTTP previews of ports programs listen on in their
// sandboxes: each a random name and secret for one execution's port,
// expiring, revocable, proxied to the port through session.Ports with
// WebSocket upgrades. A visit with ?termgate_preview=SECRET gets the
// secret as an HttpOnly, SameSite=Lax cookie of that origin (and path)
// and is sent to the same URL without it; later visits carry the
// cookie. Path-based previews (/v1/preview/NAME/...) share the gateway's
// origin: no Set-Cookie of the program reaches the browser. Host-based
// ones (NAME.DOMAIN, with Config.PreviewDomain) each have an origin of
// their own, the choice for programs that are not trusted: their
// cookies pass, but none with a Domain (it would reach the other
// previews). Neither passes the gateway's token or the preview's cookie
// on to the program. They live in this server's memory: a restart, or
// another node, does not know them.
type previews struct {
	s *Server

	mu     sync.Mutex
	byName map[string]*preview
}

type preview struct {
	name, secret string
	tenant, exec string
	port         int
	expires      time.Time
	proxy        *httputil.ReverseProxy
}

// newPreviewName is a DNS label of 26 lowercase letters and digits:
// 130 random bits.
func newPreviewName(node string) string {
	var b [16]byte
	rand.Read(b[:])
	name := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
	if node != "" && len(name)+1+len(node) <= 63 { // a DNS label, for host-based previews
		name += "-" + node
	}
	return name
}

// previewNode is the node a preview's name says made it; "" when it
// names none.
func previewNode(name string) string {
	_, node, _ := strings.Cut(name, "-")
	return node
}

// apiPreview is a preview as the HTTP API answers it.
type apiPreview struct {
	URL       string `json:"url"`
	Name      string `json:"name"`
	ExpiresAt string `json:"expires_at"`
}

// postPreview makes a preview of a port: POST
// /v1/executions/{id}/ports/{port}/preview, {"ttl_seconds": N}.
func (a *httpAPI) postPreview(w http.ResponseWriter, r *http.Request, c auth.Claims) error {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		return &apiError{wire.CodeBadRequest, "port must be a number from 1 to 65535"}
	}
	var body struct {
		TTLSeconds int64 `json:"ttl_seconds"`
	}
	if r.ContentLength != 0 {
		if err := a.decodeBody(w, r, 4<<10, &body); err != nil {
			return err
		}
	}
	ttl := DefaultPreviewTTL
	if body.TTLSeconds != 0 {
		ttl = time.Duration(body.TTLSeconds) * time.Second
	}
	if ttl <= 0 || ttl > MaxPreviewTTL {
		return &apiError{wire.CodeBadRequest, fmt.Sprintf("ttl_seconds must be from 1 to %d", int64(MaxPreviewTTL/time.Second))}
	}
	id := r.PathValue("id")
	// The execution must exist, be the tenant's and run: the preview would
	// otherwise name nothing.
	if _, err := a.s.cfg.Supervisor.Ports().Listening(c.Tenant, id); err != nil {
		return err
	}
	p, err := a.s.previews.add(c.Tenant, id, port, ttl)
	if err != nil {
		return err
	}
	if a.s.cfg.Audit != nil {
		rec := a.httpWho(r, c, eventPreview)
		rec.Execution, rec.Port = clip(id, auditMaxID), uint16(port)
		if a.s.cfg.Audit.Record(rec) != nil {
			a.s.previews.remove(p.name)
			return errAuditRefused
		}
	}
	a.respond(w, http.StatusCreated, apiPreview{URL: a.s.previewURL(r, p), Name: p.name, ExpiresAt: p.expires.UTC().Format(time.RFC3339)})
	return nil
}

// deletePreview revokes every preview of a port: DELETE
// /v1/executions/{id}/ports/{port}/preview.
func (a *httpAPI) deletePreview(w http.ResponseWriter, r *http.Request, c auth.Claims) error {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		return &apiError{wire.CodeBadRequest, "port must be a number from 1 to 65535"}
	}
	n := a.s.previews.revoke(c.Tenant, r.PathValue("id"), port)
	if a.s.cfg.Audit != nil && n > 0 {
		rec := a.httpWho(r, c, eventPreviewRevoke)
		rec.Execution, rec.Port = clip(r.PathValue("id"), auditMaxID), uint16(port)
		a.s.cfg.Audit.Record(rec) // after the fact: a revocation is never refused
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// previewURL is where p is visited, with its secret for the first visit.
func (s *Server) previewURL(r *http.Request, p *preview) string {
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	q := "?" + previewCookie + "=" + p.secret
	if d := s.cfg.PreviewDomain; d != "" {
		host := p.name + "." + d
		if _, port, err := net.SplitHostPort(r.Host); err == nil {
			host = net.JoinHostPort(host, port) // the port the gateway was reached on
		}
		return scheme + "://" + host + "/" + q
	}
	return scheme + "://" + r.Host + previewPath + p.name + "/" + q
}

// add makes a preview, within the bounds.
func (ps *previews) add(tenant, exec string, port int, ttl time.Duration) (*preview, error) {
	var sb [32]byte
	rand.Read(sb[:])
	node := ""
	if ps.s.route != nil {
		node = ps.s.route.self()
	}
	p := &preview{name: newPreviewName(node), secret: base64.RawURLEncoding.EncodeToString(sb[:]),
		tenant: tenant, exec: exec, port: port, expires: time.Now().Add(ttl)}
	p.proxy = ps.s.previewProxy(p)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.sweepLocked()
	mine := 0
	for _, q := range ps.byName {
		if q.tenant == tenant {
			mine++
		}
	}
	switch {
	case mine >= MaxPreviewsPerTenant:
		return nil, &apiError{wire.CodeCapacity, fmt.Sprintf("the tenant has %d previews alive, the most it may: revoke some, or let them expire", MaxPreviewsPerTenant)}
	case len(ps.byName) >= MaxPreviews:
		return nil, &apiError{wire.CodeCapacity, "the server holds as many previews as it may; retry later"}
	}
	if ps.byName == nil {
		ps.byName = map[string]*preview{}
	}
	ps.byName[p.name] = p
	return p, nil
}

// sweepLocked forgets the expired previews. Called with ps.mu held.
func (ps *previews) sweepLocked() {
	now := time.Now()
	for name, p := range ps.byName {
		if !now.Before(p.expires) {
			delete(ps.byName, name)
		}
	}
}

func (ps *previews) remove(name string) {
	ps.mu.Lock()
	delete(ps.byName, name)
	ps.mu.Unlock()
}

// revoke forgets the previews of a port and says how many there were.
func (ps *previews) revoke(tenant, exec string, port int) int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	n := 0
	for name, p := range ps.byName {
		if p.tenant == tenant && p.exec == exec && p.port == port {
			delete(ps.byName, name)
			n++
		}
	}
	return n
}

// lookup returns a live preview by name.
func (ps *previews) lookup(name string) (*preview, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p, ok := ps.byName[name]
	if ok && !time.Now().Before(p.expires) {
		delete(ps.byName, name)
		return nil, false
	}
	return p, ok
}

// previewProxy proxies to p's port, from inside the execution's network.
func (s *Server) previewProxy(p *preview) *httputil.ReverseProxy {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, forwardDialTimeout)
			defer cancel()
			return s.cfg.Supervisor.Ports().Dial(ctx, p.tenant, p.exec, uint16(p.port))
		},
		MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second, ResponseHeaderTimeout: 5 * time.Minute,
	}
	hostBased := s.cfg.PreviewDomain != ""
	return &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The program sees a request to its own loopback, as dev servers
			// and debuggers that refuse other Host headers (DNS rebinding)
			// want; X-Forwarded-Host and -Proto say where it was made.
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))
			pr.Out.Host = pr.Out.URL.Host
			pr.SetXForwarded()
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("Proxy-Authorization")
			stripPreviewCookie(pr.Out.Header)
		},
		ModifyResponse: func(resp *http.Response) error {
			cookies := resp.Header.Values("Set-Cookie")
			resp.Header.Del("Set-Cookie")
			for _, c := range cookies {
				if hostBased && !cookieHasDomain(c) && !strings.HasPrefix(strings.TrimSpace(c), previewCookie+"=") {
					resp.Header.Add("Set-Cookie", c)
				}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			code := errorCode(err)
			if code == wire.CodeInternal {
				s.log.Info("preview: the port did not answer", "execution", p.exec, "port", p.port, "err", err)
			}
			http.Error(w, "preview: "+previewFailure(code), http.StatusBadGateway)
		},
	}
}

// previewFailure says why a preview's port was not reached.
func previewFailure(code string) string {
	switch code {
	case wire.CodeRefused:
		return "nothing listens on the port"
	case wire.CodeNotRunning, wire.CodeNotFound, wire.CodeGone:
		return "the execution is not running"
	}
	return "the port did not answer"
}

// cookieHasDomain reports whether a Set-Cookie value names a Domain.
func cookieHasDomain(v string) bool {
	for _, attr := range strings.Split(v, ";")[1:] {
		k, _, _ := strings.Cut(strings.TrimSpace(attr), "=")
		if strings.EqualFold(k, "domain") {
			return true
		}
	}
	return false
}

// stripPreviewCookie removes the preview's own cookie from a request's
// Cookie headers.
func stripPreviewCookie(h http.Header) {
	var kept []string
	for _, line := range h.Values("Cookie") {
		var parts []string
		for _, c := range strings.Split(line, ";") {
			if name, _, _ := strings.Cut(strings.TrimSpace(c), "="); name != previewCookie && strings.TrimSpace(c) != "" {
				parts = append(parts, strings.TrimSpace(c))
			}
		}
		if len(parts) > 0 {
			kept = append(kept, strings.Join(parts, "; "))
		}
	}
	h.Del("Cookie")
	for _, c := range kept {
		h.Add("Cookie", c)
	}
}

// servePreviewPath serves /v1/preview/NAME/...: the request reaches
// the port with the path after NAME.
func (s *Server) servePreviewPath(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, previewPath)
	name, sub, _ := strings.Cut(rest, "/")
	s.servePreview(w, r, name, previewPath+name+"/", "/"+sub)
}

// previewHost is the preview a request's Host names under
// Config.PreviewDomain, if any.
func (s *Server) previewHost(r *http.Request) (string, bool) {
	d := s.cfg.PreviewDomain
	if d == "" {
		return "", false
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	name, ok := strings.CutSuffix(strings.ToLower(host), "."+strings.ToLower(d))
	return name, ok && name != "" && !strings.Contains(name, ".")
}

// servePreview checks the preview's secret (query, then cookie) and
// proxies the request, its path replaced by path; base is the cookie's
// path.
func (s *Server) servePreview(w http.ResponseWriter, r *http.Request, name, base, path string) {
	p, ok := s.previews.lookup(name)
	if !ok && s.relayPreview(w, r, name) {
		return
	}
	if !ok {
		http.Error(w, "no such preview, or it expired", http.StatusNotFound)
		return
	}
	if q := r.URL.Query(); q.Has(previewCookie) {
		if subtle.ConstantTimeCompare([]byte(q.Get(previewCookie)), []byte(p.secret)) != 1 {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: previewCookie, Value: p.secret, Path: base, HttpOnly: true,
			SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil, Expires: p.expires})
		q.Del(previewCookie)
		u := *r.URL
		u.RawQuery = q.Encode()
		http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
		return
	}
	c, err := r.Cookie(previewCookie)
	if err != nil || subtle.ConstantTimeCompare([]byte(c.Value), []byte(p.secret)) != 1 {
		http.Error(w, "forbidden: open the preview's URL, with its secret, first", http.StatusForbidden)
		return
	}
	out := r.Clone(r.Context())
	out.URL = &url.URL{Path: path, RawQuery: r.URL.RawQuery}
	p.proxy.ServeHTTP(w, out)
}

// dnsName reports whether d is a DNS name: dot-separated labels of
// letters, digits and inner hyphens, 253 bytes at most.
func dnsName(d string) bool {
	if len(d) > 253 {
		return false
	}
	for l := range strings.SplitSeq(d, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, r := range l {
			if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return false
			}
		}
	}
	return true
}

// relayPreview serves a request for a preview another node of the
// cluster made (its name says which) through that node, WebSocket
// upgrades included: a load balancer may bring a preview's requests to
// any node. It reports whether it did.
func (s *Server) relayPreview(w http.ResponseWriter, r *http.Request, name string) bool {
	rt, node := s.route, previewNode(name)
	if rt == nil || node == "" || node == rt.self() {
		return false
	}
	base, ok := rt.cfg.Members.URL(node)
	if !ok {
		return false
	}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(base)
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del(cluster.HopHeader)
		},
		Transport:     rt.rt,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			s.log.Info("preview not relayed", "node", node, "err", err)
			http.Error(w, "the preview's node does not answer", http.StatusBadGateway)
		},
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	p.ServeHTTP(w, r)
	return true
}
