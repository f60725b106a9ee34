package gateway

import (
	"net/http"
	"strings"

	"github.com/termgate/termgate/gateway/audit"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/execid"
)

// The audit trail's hooks in the HTTP API (audit_events.go has the
// WebSocket's and the rules they share).

// httpWho is an HTTP record's common part.
func (a *httpAPI) httpWho(r *http.Request, c auth.Claims, event string) *audit.Record {
	return &audit.Record{Event: event, Tenant: c.Tenant, Subject: c.Subject, RemoteAddr: a.s.remoteAddr(r), Via: viaHTTP}
}

// apiEvent names an HTTP API route in the trail.
func apiEventName(r *http.Request) string {
	switch p := r.Pattern; {
	case p == "POST /v1/executions":
		return wire.TypeStart
	case p == "GET /v1/executions":
		return "list"
	case strings.HasSuffix(p, "/events"):
		return "events"
	case strings.HasSuffix(p, "/input"), strings.HasSuffix(p, "/write"):
		return "input"
	case p == "POST /v1/exec":
		return "exec"
	case strings.HasSuffix(p, "/cancel"):
		return wire.TypeCancel
	case strings.HasSuffix(p, "/network"):
		return eventNetwork
	case strings.HasPrefix(p, "GET "):
		return "get"
	}
	return "request"
}

// errAuditRefused answers an HTTP request whose record could not be
// written.
var errAuditRefused = &apiError{wire.CodeUnavailable, unavailableText}

// auditRefusal records a refused HTTP request (a refused token was
// recorded with its reason by auditAuthFailed).
func (a *httpAPI) auditRefusal(r *http.Request, c auth.Claims, code string) {
	if a.s.cfg.Audit == nil || code == wire.CodeUnauthorized {
		return
	}
	rec := a.httpWho(r, c, apiEventName(r))
	id := r.PathValue("id")
	rec.Execution = clip(id, auditMaxID)
	var cross func() bool
	if code == wire.CodeNotFound && id != "" {
		cross = func() bool { return a.s.cfg.Supervisor.HeldByOther(c.Tenant, id) }
	}
	a.s.cfg.Audit.Refused(rec, code, cross)
}

// auditAuthFailed records a refused token: its reason only.
func (a *httpAPI) auditAuthFailed(r *http.Request, token string, err error) {
	rec := &audit.Record{Event: apiEventName(r), RemoteAddr: a.s.remoteAddr(r), Via: viaHTTP, Reason: authReason(token, err)}
	a.s.cfg.Audit.Refused(rec, wire.CodeUnauthorized, nil)
}

// auditStart names and records an HTTP start, like conn.auditStart.
func (a *httpAPI) auditStart(r *http.Request, c auth.Claims, req *wire.Request, spec session.Spec) error {
	if a.s.cfg.Audit == nil {
		return nil
	}
	if req.ID == "" {
		req.ID = execid.New()
	}
	rec := a.httpWho(r, c, wire.TypeStart)
	startRecord(rec, req.ID, spec)
	if a.s.cfg.Audit.Record(rec) != nil {
		return errAuditRefused
	}
	return nil
}

// auditAction records an HTTP input (its size: bytes, and whether it
// closes stdin) or cancel of an execution the tenant has; one it has not
// is left to the refusal. An input that only reads the offset writes
// nothing.
func (a *httpAPI) auditAction(r *http.Request, c auth.Claims, id string, bytes int, closeStdin bool) error {
	return a.auditActionAs(r, c, apiEventName(r), id, bytes, closeStdin)
}

// auditActionAs is auditAction recorded as event (an agent exec's stdin
// is an input).
func (a *httpAPI) auditActionAs(r *http.Request, c auth.Claims, event, id string, bytes int, closeStdin bool) error {
	if a.s.cfg.Audit == nil || event == "input" && bytes == 0 && !closeStdin {
		return nil
	}
	if _, err := a.s.cfg.Supervisor.Get(c.Tenant, id); err != nil {
		return nil
	}
	rec := a.httpWho(r, c, event)
	rec.Execution = id
	if event == "input" {
		n := uint64(bytes)
		rec.InputBytes = &n
		if closeStdin {
			rec.Reason = wire.TypeCloseStdin
		}
	}
	if a.s.cfg.Audit.Record(rec) != nil {
		return errAuditRefused
	}
	return nil
}
