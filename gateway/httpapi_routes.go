package gateway

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/session"
)

// apiRoutes registers the HTTP API on mux. Server.Handler calls it.
func (s *Server) apiRoutes(mux *http.ServeMux) {
	a := &httpAPI{s: s}
	mux.HandleFunc("POST /v1/executions", a.route(auth.ScopeCreate, a.start))
	mux.HandleFunc("GET /v1/executions", a.route(auth.ScopeAttach, a.list))
	mux.HandleFunc("GET /v1/executions/{id}", a.route(auth.ScopeAttach, a.get))
	mux.HandleFunc("GET /v1/executions/{id}/events", a.route(auth.ScopeAttach, a.events))
	mux.HandleFunc("GET /v1/executions/{id}/recording", a.route(auth.ScopeAttach, a.recording))
	mux.HandleFunc("POST /v1/executions/{id}/input", a.route(auth.ScopeWrite, a.input))
	mux.HandleFunc("POST /v1/executions/{id}/cancel", a.route(auth.ScopeWrite, a.cancel))
	mux.HandleFunc("GET /v1/executions/{id}/network", a.route(auth.ScopeAttach, a.getNetwork))
	mux.HandleFunc("PUT /v1/executions/{id}/network", a.route(auth.ScopeWrite, a.putNetwork))
	mux.HandleFunc("GET /v1/executions/{id}/ports", a.route(auth.ScopeAttach, a.getPorts))
	mux.HandleFunc("POST /v1/executions/{id}/ports/{port}/preview", a.route(ScopeForward, a.postPreview))
	mux.HandleFunc("DELETE /v1/executions/{id}/ports/{port}/preview", a.route(ScopeForward, a.deletePreview))
	mux.HandleFunc("GET /v1/openapi.json", serveOpenAPI)
	a.filesRoutes(mux)
	(&agentHTTP{s.agent, a}).routes(mux)
}

// route authenticates and checks scope before h runs, and answers h's
// error.
func (a *httpAPI) route(scope string, h apiHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r, ok := a.verifyHop(w, r) // cluster_http.go
		if !ok {
			return
		}
		c, err := a.authorize(r, scope)
		if err == nil && a.forward(w, r, c) {
			return
		}
		if err == nil {
			err = h(w, r, c)
		}
		if err != nil {
			a.fail(w, r, c, err)
		}
	}
}

// start answers 201 when the request made the execution and 200 when an
// equal start already had (a retry). It compares incarnations rather than
// asking whether the id exists first: an ended execution that retention
// removes between that question and the start is replaced by a new one,
// which the answer must call new. Two concurrent first starts of one id
// may both see 201; both describe the same execution.
func (a *httpAPI) start(w http.ResponseWriter, r *http.Request, c auth.Claims) error {
	if a.s.route == nil && !a.s.starts.allow(c) {
		return errStartRate
	}
	var body apiStart
	if err := a.decodeBody(w, r, a.s.cfg.MaxMessageBytes, &body); err != nil {
		return err
	}
	req := body.request()
	if a.placed(w, r, c, &req, func(req wire.Request) any { return apiStartOf(req) }) { // cluster_start.go: elsewhere, or a probe
		return nil
	}
	info, created, err := a.startHere(r, c, req)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	w.Header().Set("Location", "/v1/executions/"+url.PathEscape(info.ID))
	a.respond(w, status, a.execution(info))
	return nil
}

// startHere starts req on this node, for a start the cluster placed here
// (or with no cluster): created is false when an equal start had made the
// execution already (a retry).
func (a *httpAPI) startHere(r *http.Request, c auth.Claims, req wire.Request) (info session.Info, created bool, err error) {
	if a.s.route != nil && !a.s.starts.allow(c) { // the owner's limit, not the front's
		return info, false, errStartRate
	}
	spec, err := a.s.spec(c.Tenant, req)
	if err != nil {
		return info, false, err
	}
	if code, msg := a.s.recordStart(c, req, &spec); code != "" {
		return info, false, &apiError{code, msg}
	}
	if code, msg := mayUseNetwork(c, req.Network); code != "" {
		return info, false, &apiError{code, msg}
	}
	if err := a.auditStart(r, c, &req, spec); err != nil {
		return info, false, err
	}
	was := a.incarnation(c.Tenant, req.ID)
	who := session.WithLogAttrs(r.Context(), "subject", c.Subject, "remote_addr", a.s.remoteAddr(r))
	info, err = a.s.cfg.Supervisor.Start(who, c.Tenant, req.ID, spec)
	if err != nil {
		return info, false, err
	}
	return info, info.Incarnation != was, nil
}

// incarnation returns the incarnation of tenant's execution id, or ""
// when there is none.
func (a *httpAPI) incarnation(tenant, id string) string {
	if id == "" {
		return ""
	}
	info, err := a.s.cfg.Supervisor.Get(tenant, id)
	if err != nil {
		return ""
	}
	return info.Incarnation
}

func (a *httpAPI) list(w http.ResponseWriter, r *http.Request, c auth.Claims) error {
	a.respond(w, http.StatusOK, a.clusterList(r, c, a.s.cfg.Supervisor.List(c.Tenant)))
	return nil
}

func (a *httpAPI) get(w http.ResponseWriter, r *http.Request, c auth.Claims) error {
	info, err := a.s.cfg.Supervisor.Get(c.Tenant, r.PathValue("id"))
	if err != nil {
		return err
	}
	a.respond(w, http.StatusOK, a.execution(info))
	return nil
}

// cancel answers 202: the execution gets SIGTERM now and ends shortly,
// as cancelled.
func (a *httpAPI) cancel(w http.ResponseWriter, r *http.Request, c auth.Claims) error {
	sup, id := a.s.cfg.Supervisor, r.PathValue("id")
	if err := a.auditAction(r, c, id, 0, false); err != nil {
		return err
	}
	if err := sup.Cancel(c.Tenant, id); err != nil {
		return err
	}
	info, err := sup.Get(c.Tenant, id)
	if err != nil {
		return err
	}
	a.respond(w, http.StatusAccepted, a.execution(info))
	return nil
}

// apiInput is the body of POST /v1/executions/{id}/input.
type apiInput struct {
	Offset     uint64 `json:"offset"`
	Data       []byte `json:"data"`
	CloseStdin bool   `json:"close_stdin"`
}

// input applies the bytes the execution has not received yet, so a
// retried request is harmless; empty data only reports the input offset.
func (a *httpAPI) input(w http.ResponseWriter, r *http.Request, c auth.Claims) error {
	if !a.s.inputs.allow(c) {
		return &apiError{wire.CodeRateLimited, "too many input requests; resend from the execution's input offset"}
	}
	var body apiInput
	if err := a.decodeBody(w, r, a.s.cfg.MaxMessageBytes, &body); err != nil {
		return err
	}
	sup, id := a.s.cfg.Supervisor, r.PathValue("id")
	if err := a.auditAction(r, c, id, len(body.Data), body.CloseStdin); err != nil {
		return err
	}
	offset, err := sup.Input(c.Tenant, id, body.Offset, body.Data)
	if err != nil {
		return err
	}
	if body.CloseStdin {
		if err := sup.CloseStdin(c.Tenant, id); err != nil {
			return err
		}
	}
	a.respond(w, http.StatusOK, struct {
		InputOffset uint64 `json:"input_offset"`
	}{offset})
	return nil
}

// apiEvents is one events answer.
type apiEvents struct {
	Events []apiEvent  `json:"events"`
	Gap    *replay.Gap `json:"gap"`
	// NextAfter is the after of the next call: the last sequence this
	// answer holds or skipped with its gap.
	NextAfter uint64         `json:"next_after"`
	Status    session.Status `json:"status"`
	// Ended is true once the answer reached the exit event: nothing follows.
	Ended bool `json:"ended"`
	// Incarnation names the execution the sequences count in: the next
	// call passes it with its after.
	Incarnation string `json:"incarnation"`
}

// apiEvent is a ring event as JSON. Data is base64, as encoding/json
// writes []byte; encoding it at once also copies it out of the ring.
type apiEvent struct {
	Seq    uint64     `json:"seq"`
	Kind   string     `json:"kind"`
	Time   time.Time  `json:"time"`
	Stream string     `json:"stream,omitempty"`
	Offset *uint64    `json:"offset,omitempty"` // output only, where 0 is a value
	Data   string     `json:"data,omitempty"`
	Rows   int        `json:"rows,omitempty"`
	Cols   int        `json:"cols,omitempty"`
	Signal string     `json:"signal,omitempty"`
	Exit   *apiExit   `json:"exit,omitempty"`
	Notice *apiNotice `json:"notice,omitempty"`
}

// apiNotice is a notice event's payload; At as in the wire's notice.
type apiNotice struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
	At      string `json:"at,omitempty"`
}

type apiExit struct {
	Code       int    `json:"code"`
	Signal     string `json:"signal,omitempty"`
	Reason     string `json:"reason"`
	DurationMS int64  `json:"duration_ms"`
}

func newAPIEvent(ev replay.Event) apiEvent {
	out := apiEvent{Seq: ev.Seq, Kind: ev.Kind.String(), Time: ev.Time, Rows: int(ev.Rows), Cols: int(ev.Cols), Signal: signalName(ev.Signal)}
	if ev.Kind == replay.KindOutput {
		offset := ev.Offset
		out.Stream, out.Offset, out.Data = ev.Stream.String(), &offset, base64.StdEncoding.EncodeToString(ev.Data)
	}
	if x := ev.Exit; x != nil {
		out.Exit = &apiExit{Code: x.Code, Signal: signalName(x.Signal), Reason: x.Reason, DurationMS: x.Duration.Milliseconds()}
	}
	if n := ev.Notice; n != nil {
		out.Notice = &apiNotice{Reason: n.Reason, Message: n.Message, At: noticeTime(n.At)}
	}
	return out
}

// events is the long poll: it answers at once when there are events
// after ?after= or the execution has ended, and otherwise when one
// arrives or ?wait= passes.
func (a *httpAPI) events(w http.ResponseWriter, r *http.Request, c auth.Claims) error {
	after, wait, err := pollQuery(r.URL.Query())
	if err != nil {
		return err
	}
	if wait > 0 {
		// A held poll is a connection the subject keeps open: it takes a
		// place of the same budget as its WebSocket connections.
		if err := a.s.admit(subjectKey(c)); err != nil {
			if errors.Is(err, errSubjectBusy) {
				return &apiError{wire.CodeTooManyConnections, fmt.Sprintf("at most %d connections and long polls per subject; retry when one ends", a.s.cfg.MaxConnsPerSubject)}
			}
			return err
		}
		defer a.s.release(subjectKey(c))
	}
	sup, id := a.s.cfg.Supervisor, r.PathValue("id")
	after, checked, err := a.continueAfter(c, id, after, r.URL.Query().Get("incarnation"))
	if err != nil {
		return err
	}
	if err := a.ackPoll(c, id, after); err != nil {
		return err
	}
	ctx, stop := a.s.untilRestart(r.Context())
	defer stop()
	info, err := sup.Wait(ctx, c.Tenant, id, after, wait)
	if err != nil {
		if errors.Is(context.Cause(ctx), errRestarting) && r.Context().Err() == nil {
			return errRestarting
		}
		return err
	}
	if checked != "" && info.Incarnation != checked {
		after = 0 // the ID was reused while the poll waited: the new execution from its start
	}
	page := apiEvents{Events: []apiEvent{}, NextAfter: after}
	if info.LastSeq > after {
		sub, now, err := sup.Subscribe(c.Tenant, id, session.AttachOptions{After: after, Incarnation: info.Incarnation})
		if err != nil {
			return err
		}
		defer sub.Close()
		if now.Incarnation != info.Incarnation { // reused again meanwhile
			page.NextAfter, info = 0, now
		}
		if err := page.fill(r.Context(), sub, info.LastSeq); err != nil {
			return err
		}
		if now, err := sup.Get(c.Tenant, id); err == nil {
			info = now
		}
	}
	page.Status, page.Incarnation = info.Status, info.Incarnation
	page.Ended = info.Result != nil && page.NextAfter >= info.LastSeq
	a.respond(w, http.StatusOK, page)
	return nil
}

// continueAfter is the after a poll reads from, and the incarnation it
// counts in ("" for 0): a non-zero after needs the incarnation it
// belongs to, since the ID may name a new execution by now (reused after
// retention), whose first events would otherwise be skipped with no gap;
// for another incarnation than the execution's it is 0, its start.
func (a *httpAPI) continueAfter(c auth.Claims, id string, after uint64, incarnation string) (uint64, string, error) {
	if after == 0 {
		return 0, "", nil
	}
	if incarnation == "" {
		return 0, "", &apiError{wire.CodeInvalidAfter, fmt.Sprintf("after %d needs the incarnation it belongs to (the incarnation of the answer it came with), or after 0", after)}
	}
	info, err := a.s.cfg.Supervisor.Get(c.Tenant, id)
	if err != nil {
		return 0, "", err
	}
	if info.Incarnation != incarnation {
		return 0, "", nil
	}
	return after, incarnation, nil
}

// ackPoll refuses an after the execution has not reached, and counts a
// writer's poll as its acknowledgement of the events up to after, so an
// execution polled within its hold window loses nothing.
func (a *httpAPI) ackPoll(c auth.Claims, id string, after uint64) error {
	sup := a.s.cfg.Supervisor
	info, err := sup.Get(c.Tenant, id)
	if err != nil {
		return err
	}
	if after > info.LastSeq {
		return fmt.Errorf("%w: after %d, newest is %d", session.ErrAfter, after, info.LastSeq)
	}
	if !c.Has(auth.ScopeWrite) {
		return nil
	}
	return sup.AckPoll(c.Tenant, id, after)
}

// fill reads the events after p.NextAfter up to sequence last, which all
// exist, so Next never waits; at most apiMaxPollDataSize of output. It
// moves NextAfter only past what p holds: anything left out, a second gap
// included, comes with the next call.
func (p *apiEvents) fill(ctx context.Context, sub *session.Subscription, last uint64) error {
	size := 0
	for p.NextAfter < last {
		evs, gap, err := sub.Next(ctx)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return err
		case gap != nil:
			if len(p.Events) > 0 || p.Gap != nil {
				return nil
			}
			p.Gap, p.NextAfter = gap, gap.To-1
			continue
		}
		for _, ev := range evs {
			if size += len(ev.Data); size > apiMaxPollDataSize && len(p.Events) > 0 {
				return nil
			}
			p.Events = append(p.Events, newAPIEvent(ev))
			p.NextAfter = ev.Seq
		}
	}
	return nil
}
