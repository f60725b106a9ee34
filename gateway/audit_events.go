package gateway

// The audit trail's hooks in the WebSocket protocol and the HTTP API:
// which record each request writes, and when. An action's record is
// written before the action takes effect (outcome ok: it was allowed),
// and the action is refused with code unavailable when it cannot be; a
// request the supervisor refuses after that gets a refused record too.
// A lookup first keeps most refusals (an unknown or another tenant's
// execution) from having an ok record before them.

import (
	"errors"
	"net/http"

	"github.com/termgate/termgate/gateway/audit"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/execid"
)

// Where a record's request came from.
const (
	viaWebSocket = "websocket"
	viaHTTP      = "http"
)

// unavailableText answers a request refused because its record could
// not be written.
const unavailableText = "the audit trail cannot be written; retry later"

// Bounds of what a client chooses that a record repeats, so a record
// stays far below audit.MaxRecordSize whatever was sent.
const (
	auditMaxID      = 256
	auditMaxName    = 64
	auditMaxCommand = 1024
)

// clip cuts a client-chosen string to n bytes (a cut rune is escaped by
// encoding/json like any invalid UTF-8).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// who is a WebSocket record's common part.
func (c *conn) who(event string) *audit.Record {
	cl := c.currentClaims()
	return &audit.Record{Event: event, Tenant: cl.Tenant, Subject: cl.Subject, RemoteAddr: c.remote, Via: viaWebSocket}
}

// auditRefusal records a refused WebSocket request. A not_found for an
// ID another tenant holds is marked cross_tenant; the client's answer
// is the same either way. A refused reauth was recorded with its reason.
func (c *conn) auditRefusal(req wire.Request, channel uint32, code string) {
	a := c.s.cfg.Audit
	if a == nil || req.Type == wire.TypeReauth && code == wire.CodeUnauthorized {
		return
	}
	r := c.who(clip(req.Type, auditMaxName))
	r.Channel, r.Execution = channel, clip(req.ID, auditMaxID)
	if ch, ok := c.channel(channel); ok && r.Execution == "" {
		r.Execution = ch.execID
	}
	var cross func() bool
	if code == wire.CodeNotFound && req.ID != "" {
		cross = func() bool { return c.s.cfg.Supervisor.HeldByOther(r.Tenant, req.ID) }
	}
	a.Refused(r, code, cross)
}

// auditAuthFailed records a refused reauth token: its reason only.
func (c *conn) auditAuthFailed(token string, err error) {
	r := c.who(wire.TypeReauth)
	r.Reason = authReason(token, err)
	c.s.cfg.Audit.Refused(r, wire.CodeUnauthorized, nil)
}

// unavailable answers a request whose record could not be written.
func (c *conn) unavailable(req wire.Request, channel uint32) {
	c.fail(req, channel, wire.CodeUnavailable, unavailableText)
}

// auditStart names the execution (a start without an ID gets one now,
// so its record can say which) and records the start; false: it was
// refused.
func (c *conn) auditStart(req *wire.Request, spec session.Spec) bool {
	if c.s.cfg.Audit == nil {
		return true
	}
	if req.ID == "" {
		req.ID = execid.New()
	}
	r := c.who(wire.TypeStart)
	startRecord(r, req.ID, spec)
	if c.s.cfg.Audit.Record(r) != nil {
		c.unavailable(*req, 0)
		return false
	}
	return true
}

// startRecord fills a start's record from the spec it runs: the
// command line, terminal, directories. Never its environment.
func startRecord(r *audit.Record, id string, spec session.Spec) {
	p := spec.Policy
	tty := p.TTY != nil
	r.Execution, r.Argv, r.TTY, r.Cwd, r.Workspace = id, p.Command, &tty, p.Cwd, p.Workspace
	if len(p.Command) > 0 {
		r.Command = p.Command[0]
	}
	if tty {
		r.Rows, r.Cols = int(p.TTY.Rows), int(p.TTY.Cols)
	}
}

// auditAttach records an attach of an execution the tenant has; one it
// has not is left to the refusal. False: it was refused.
func (c *conn) auditAttach(req wire.Request, id string, after uint64, readOnly bool) bool {
	if c.s.cfg.Audit == nil || !c.has(id) {
		return true
	}
	r := c.who(wire.TypeAttach)
	r.Execution, r.ReadOnly, r.After = id, &readOnly, &after
	if c.s.cfg.Audit.Record(r) != nil {
		c.unavailable(req, 0)
		return false
	}
	return true
}

// has reports whether the connection's tenant has execution id.
func (c *conn) has(id string) bool {
	_, err := c.s.cfg.Supervisor.Get(c.currentClaims().Tenant, id)
	return err == nil
}

// auditModify records a resize, signal, cancel or close-stdin on a
// channel. False: it was refused.
func (c *conn) auditModify(req wire.Request, ch *channel) bool {
	if c.s.cfg.Audit == nil {
		return true
	}
	r := c.who(req.Type)
	r.Execution, r.Channel = ch.execID, ch.id
	switch req.Type {
	case wire.TypeResize:
		r.Rows, r.Cols = req.Rows, req.Cols
	case wire.TypeSignal:
		r.Signal = clip(req.Signal, auditMaxName)
	}
	if c.s.cfg.Audit.Record(r) != nil {
		c.unavailable(req, ch.id)
		return false
	}
	return true
}

// auditCancelID records a cancel by ID (no channel) of an execution the
// tenant has. False: it was refused.
func (c *conn) auditCancelID(req wire.Request) bool {
	if c.s.cfg.Audit == nil || !c.has(req.ID) {
		return true
	}
	r := c.who(wire.TypeCancel)
	r.Execution = req.ID
	if c.s.cfg.Audit.Record(r) != nil {
		c.unavailable(req, 0)
		return false
	}
	return true
}

// auditFirstInput records a channel's first input; later input is
// counted, not recorded. A non-empty code refuses the frame.
func (c *conn) auditFirstInput(ch *channel) (code, msg string) {
	if c.s.cfg.Audit == nil || ch.audit.inputSeen {
		return "", ""
	}
	r := c.who("input")
	r.Execution, r.Channel = ch.execID, ch.id
	if c.s.cfg.Audit.Record(r) != nil {
		return wire.CodeUnavailable, unavailableText
	}
	ch.audit.inputSeen = true
	return "", ""
}

// auditInput counts what a frame delivered, or records its refusal (the
// first of a streak: a client retrying in a loop writes one record).
func (c *conn) auditInput(ch *channel, in wire.Input, received uint64, code string) {
	st := &ch.audit
	if code == "" {
		if from := max(in.Offset, st.received); received > from {
			st.bytes.Add(min(received-from, uint64(len(in.Data))))
		}
		st.received, st.refusing = max(st.received, received), false
		return
	}
	if st.refusing || c.s.cfg.Audit == nil {
		return
	}
	st.refusing = true
	r := c.who("input")
	r.Execution, r.Channel = ch.execID, ch.id
	c.s.cfg.Audit.Refused(r, code, nil)
}

// auditDetach records a channel's end with the input it delivered:
// detached by the client, disconnected, or ended with its execution.
// Called by finishChannel before it cancels the channel.
func (c *conn) auditDetach(ch *channel) {
	if c.s.cfg.Audit == nil {
		return
	}
	r := c.who(wire.TypeDetach)
	r.Execution, r.Channel = ch.execID, ch.id
	n := ch.audit.bytes.Load()
	r.InputBytes = &n
	switch {
	case c.ctx.Err() != nil:
		r.Reason = "disconnected"
	case ch.ctx.Err() != nil:
		r.Reason = "detached"
	default:
		r.Reason = "ended"
	}
	c.s.cfg.Audit.Happened(r)
}

// auditConnect records a refused connection: the reason of a refused
// token, or the code of a token without the scopes or over the budget.
func (s *Server) auditConnect(r *http.Request, tenant, subject, code, reason string) {
	s.cfg.Audit.Refused(&audit.Record{Event: "connect", Tenant: tenant, Subject: subject, RemoteAddr: s.remoteAddr(r),
		Via: viaWebSocket, Reason: reason}, code, nil)
}

// auditEnded records how an execution ended (Supervisor.OnEnd). It
// cannot be refused: a record that cannot be written is counted.
func (s *Server) auditEnded(e session.Ended) {
	res := e.Info.Result
	if res == nil {
		return
	}
	r := &audit.Record{Event: "end", Tenant: e.Info.Owner, Execution: e.Info.ID, Status: string(res.Status),
		ExitCode: &res.ExitCode, Signal: res.Signal, Reason: clip(res.Reason, auditMaxCommand),
		Duration: res.Duration.Seconds(), StdoutBytes: &res.Stdout.Original, StderrBytes: &res.Stderr.Original,
		InputBytes: &e.Info.InputOffset}
	for i := 0; i+1 < len(e.Attrs); i += 2 {
		v, _ := e.Attrs[i+1].(string)
		switch e.Attrs[i] {
		case "subject":
			r.Subject = v
		case "remote_addr":
			r.RemoteAddr = v
		}
	}
	s.cfg.Audit.Happened(r)
}

// HTTP API.

// admitCode is the code of a connection admit refused.
func admitCode(err error) string {
	if errors.Is(err, session.ErrClosed) {
		return wire.CodeClosed
	}
	return wire.CodeTooManyConnections
}
