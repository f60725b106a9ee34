package gateway

// Agent exec: a start, or input, and a wait for what follows as text, in
// one call (PROTOCOL.md, "Agent exec"). agentExec owns it: its routes,
// the WebSocket requests' answers and where each execution's last answer
// left off.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/internal/transcript"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/session"
)

// maxCursors bounds the executions whose last answer agentExec keeps;
// past it, those of executions that are gone are dropped first.
const maxCursors = 4096

// agentExec is the agent exec's part shared by its HTTP routes
// (agentHTTP) and WebSocket requests (agentexec_ws.go): input, the wait,
// and where each subject's last answer for an execution left off. The
// Server has one.
type agentExec struct {
	s *Server

	mu      sync.Mutex
	cursors map[cursorKey]cursor

	// appending serializes writes without an offset: each reads the
	// execution's input offset and writes there, which two at once would
	// both take.
	appending sync.Mutex
}

// agentHTTP serves POST /v1/exec and POST /v1/executions/{id}/write.
type agentHTTP struct {
	*agentExec
	api *httpAPI
}

// cursorKey is whose cursor: each subject reads on its own.
type cursorKey struct{ tenant, subject, id string }

// cursor is where the last answer for an execution left off.
type cursor struct {
	incarnation string
	next        uint64
}

func newAgentExec(s *Server) *agentExec {
	return &agentExec{s: s, cursors: map[cursorKey]cursor{}}
}

func (x *agentHTTP) routes(mux *http.ServeMux) {
	a := x.api
	// A continue reads; a start needs exec:create too (exec).
	mux.HandleFunc("POST /v1/exec", a.route(auth.ScopeAttach, x.exec))
	mux.HandleFunc("POST /v1/executions/{id}/write", a.route(auth.ScopeWrite, x.write))
}

// exec starts the request's command, or continues the execution its ID
// names when it gives no command, and waits for it.
func (x *agentHTTP) exec(w http.ResponseWriter, r *http.Request, c auth.Claims) error {
	a := x.api
	var body wire.ExecRequest
	if err := a.decodeBody(w, r, a.s.cfg.MaxMessageBytes, &body); err != nil {
		return err
	}
	if err := checkWait(body.Wait); err != nil {
		return err
	}
	release, err := x.hold(c, body.Wait)
	if err != nil {
		return err
	}
	defer release()
	if body.Argv == nil && body.Command == "" {
		if x.continuedElsewhere(w, r, c, body) {
			return nil
		}
		res, err := x.continueHere(r, c, body)
		if err != nil {
			return err
		}
		a.respond(w, http.StatusOK, res)
		return nil
	}
	if !c.Has(auth.ScopeCreate) {
		return &apiError{wire.CodeForbidden, "the token lacks the " + auth.ScopeCreate + " scope"}
	}
	if a.s.route == nil && !a.s.starts.allow(c) {
		return errStartRate
	}
	req, err := startOf(body)
	if err != nil {
		return err
	}
	if err := x.mayWrite(c, body); err != nil { // before the start: a refusal starts nothing
		return err
	}
	if a.placed(w, r, c, &req, func(req wire.Request) any { body.ID = req.ID; return body }) {
		return nil
	}
	info, created, err := a.startHere(r, c, req)
	if err != nil {
		return err
	}
	if err := x.stdin(r, c, info.ID, ptr(uint64(0)), body, true); err != nil {
		return err
	}
	res, err := x.wait(r.Context(), c, info, body.Wait)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	a.respond(w, status, res)
	return nil
}

// continuedElsewhere proxies a continue of another node's execution to
// that node, as route does for a request that names it in its path.
func (x *agentHTTP) continuedElsewhere(w http.ResponseWriter, r *http.Request, c auth.Claims, body wire.ExecRequest) bool {
	if x.s.route == nil || body.ID == "" {
		return false
	}
	b, err := json.Marshal(body)
	if err != nil {
		x.api.fail(w, r, c, err)
		return true
	}
	return x.api.forwardFor(w, r, c, body.ID, b)
}

func (x *agentHTTP) continueHere(r *http.Request, c auth.Claims, body wire.ExecRequest) (wire.ExecResult, error) {
	if body.ID == "" {
		return wire.ExecResult{}, badRequest("exec needs argv or command, or the id of an execution to continue")
	}
	if err := checkContinue(body); err != nil {
		return wire.ExecResult{}, err
	}
	info, err := x.s.cfg.Supervisor.Get(c.Tenant, body.ID)
	if err != nil {
		return wire.ExecResult{}, err
	}
	if err := x.stdin(r, c, body.ID, nil, body, false); err != nil {
		return wire.ExecResult{}, err
	}
	return x.wait(r.Context(), c, info, body.Wait)
}

// stdin writes an exec request's stdin at offset, as write does;
// checked: mayWrite passed already.
func (x *agentHTTP) stdin(r *http.Request, c auth.Claims, id string, offset *uint64, body wire.ExecRequest, checked bool) error {
	if body.Stdin == "" && !body.CloseStdin {
		return nil
	}
	a := x.api
	if !checked { // a start's was, before it
		if err := x.mayWrite(c, body); err != nil {
			return err
		}
	}
	if err := a.auditActionAs(r, c, "input", id, len(body.Stdin), body.CloseStdin); err != nil {
		return err
	}
	_, err := x.input(c, id, offset, body.Stdin, body.CloseStdin)
	return err
}

// write writes the request's input and waits for what follows.
func (x *agentHTTP) write(w http.ResponseWriter, r *http.Request, c auth.Claims) error {
	a := x.api
	if !a.s.inputs.allow(c) {
		return errAgentInputRate
	}
	var body wire.WriteRequest
	if err := a.decodeBody(w, r, a.s.cfg.MaxMessageBytes, &body); err != nil {
		return err
	}
	if err := checkWait(body.Wait); err != nil {
		return err
	}
	release, err := x.hold(c, body.Wait)
	if err != nil {
		return err
	}
	defer release()
	id := r.PathValue("id")
	if err := a.auditAction(r, c, id, len(body.Input), body.CloseStdin); err != nil {
		return err
	}
	info, err := a.s.cfg.Supervisor.Get(c.Tenant, id)
	if err != nil {
		return err
	}
	if _, err := x.input(c, id, body.Offset, body.Input, body.CloseStdin); err != nil {
		return err
	}
	res, err := x.wait(r.Context(), c, info, body.Wait)
	if err != nil {
		return err
	}
	a.respond(w, http.StatusOK, res)
	return nil
}

// input writes p at offset (nil: at the end of what the execution has
// received) and closes the input after it when closeStdin. A retry of
// input the execution has all received is answered as the first was,
// even once the execution has ended.
func (x *agentExec) input(c auth.Claims, id string, offset *uint64, p string, closeStdin bool) (uint64, error) {
	sup := x.s.cfg.Supervisor
	if offset == nil {
		x.appending.Lock()
		defer x.appending.Unlock()
	}
	info, err := sup.Get(c.Tenant, id)
	if err != nil {
		return 0, err
	}
	at := info.InputOffset
	if offset != nil {
		at = *offset
	}
	end := at + uint64(len(p))
	if offset != nil && end <= info.InputOffset && (info.Result != nil || !closeStdin) {
		return info.InputOffset, nil
	}
	n := at
	if p != "" {
		if n, err = sup.Input(c.Tenant, id, at, []byte(p)); err != nil {
			return 0, err
		}
	}
	if closeStdin {
		return sup.CloseStdinAfter(c.Tenant, id, end)
	}
	return n, nil
}

// checkWait refuses a wait beyond its bounds, naming them.
func checkWait(w wire.Wait) error {
	switch {
	case w.YieldMS != nil && (*w.YieldMS < 0 || *w.YieldMS > wire.MaxYieldMS):
		return badRequest(fmt.Sprintf("yield_ms must be between 0 and %d", wire.MaxYieldMS))
	case w.MaxOutputBytes < 0 || w.MaxOutputBytes > wire.MaxMaxOutputBytes:
		return badRequest(fmt.Sprintf("max_output_bytes must be between 1 and %d (0: %d)", wire.MaxMaxOutputBytes, wire.DefaultMaxOutputBytes))
	}
	return nil
}

// startOf is the start an exec request makes.
func startOf(b wire.ExecRequest) (wire.Request, error) {
	req := wire.Request{
		Type: wire.TypeStart, ID: b.ID, Env: b.Env, Cwd: b.Cwd, TimeoutMS: b.TimeoutMS,
		Limits: b.Limits, Network: b.Network, Interactive: b.Interactive,
		WorkspaceReadOnly: b.WorkspaceReadOnly, Mounts: b.Mounts, Proc: b.Proc,
		MaxOutputBytes: b.ResultMaxOutputBytes, RetentionMS: b.RetentionMS,
	}
	switch {
	case b.Argv != nil && b.Command != "":
		return req, badRequest("exec takes argv or command, not both")
	case b.Argv != nil && (len(b.Argv) == 0 || b.Argv[0] == ""):
		return req, badRequest("argv needs a program: argv[0]")
	case b.Argv != nil:
		req.Command, req.Args = b.Argv[0], b.Argv[1:]
	default:
		req.Command, req.Args = "/bin/sh", []string{"-c", b.Command}
	}
	switch {
	case b.TTY:
		req.PTY = &wire.Size{Rows: 24, Cols: 80}
		if b.Rows != 0 {
			req.PTY.Rows = b.Rows
		}
		if b.Cols != 0 {
			req.PTY.Cols = b.Cols
		}
	case b.Rows != 0 || b.Cols != 0:
		return req, badRequest("rows and cols need tty")
	}
	return req, nil
}

func ptr[T any](v T) *T { return &v }

// wait reads the execution's events from where w says until it exits or
// w's yield passes, and makes them the answer.
func (x *agentExec) wait(ctx context.Context, c auth.Claims, info session.Info, w wire.Wait) (wire.ExecResult, error) {
	sup := x.s.cfg.Supervisor
	from := x.from(c, info, w.Seq)
	writer := c.Has(auth.ScopeWrite)
	sub, now, err := sup.Subscribe(c.Tenant, info.ID, session.AttachOptions{After: from - 1, Incarnation: info.Incarnation, Writer: writer, Ack: writer})
	if err != nil {
		return wire.ExecResult{}, err
	}
	defer sub.Close()
	if now.Incarnation != info.Incarnation { // the ID was reused meanwhile
		info, from = now, max(now.FirstSeq, 1)
	}
	strip := info.PTY
	if w.StripANSI != nil {
		strip = *w.StripANSI
	}
	yield := w.Yield()
	budget := w.MaxOutputBytes
	if budget == 0 {
		budget = wire.DefaultMaxOutputBytes
	}
	ctx, stop := x.s.untilRestart(ctx)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, yield)
	defer cancel()
	res := wire.ExecResult{ID: info.ID, FromSeq: from, NextSeq: from, Incarnation: info.Incarnation}
	text := transcript.New(transcript.Options{Budget: budget, StripANSI: strip})
	if err := x.read(ctx, sub, text, &res); err != nil {
		return wire.ExecResult{}, err
	}
	t := text.Finish()
	res.Output, res.OmittedBytes, res.ReplacedBytes = t.Text, t.Omitted, t.Replaced
	if t.Omitted > 0 {
		res.OmittedAt = t.OmittedAt
	}
	if now, err := sup.Get(c.Tenant, info.ID); err == nil {
		res.InputOffset = now.InputOffset
		if res.Exit == nil && now.Result != nil && res.NextSeq > now.LastSeq {
			res.Exit = x.exitOf(c.Tenant, now) // an answer before this one read it
		}
	}
	res.Running = res.Exit == nil
	x.keep(c, res)
	return res, nil
}

// read adds the subscription's events to text and res until the exit
// event, or until ctx ends (the yield).
func (x *agentExec) read(ctx context.Context, sub *session.Subscription, text *transcript.Builder, res *wire.ExecResult) error {
	for res.Exit == nil {
		evs, gap, ok, err := sub.TryNext()
		if !ok {
			evs, gap, err = sub.Next(ctx)
		}
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil && ctx.Err() != nil && errors.Is(context.Cause(ctx), context.DeadlineExceeded):
			return nil // the yield passed
		case err != nil:
			return err
		case gap != nil:
			res.LostBytes += gap.Bytes
			res.NextSeq = gap.To
			continue
		}
		for _, ev := range evs {
			switch ev.Kind {
			case replay.KindOutput:
				text.Write(int(ev.Stream), ev.Data)
			case replay.KindExit:
				res.Exit = &wire.ExecExit{Code: ev.Exit.Code, Signal: signalName(ev.Exit.Signal), Reason: ev.Exit.Reason}
			}
			res.NextSeq = ev.Seq + 1
		}
		if err := sub.Ack(res.NextSeq - 1); err != nil {
			return err
		}
	}
	return nil
}

// from is the first event a wait reads: seq when given, else where the
// last answer for the execution left off, else the first it retains.
func (x *agentExec) from(c auth.Claims, info session.Info, seq uint64) uint64 {
	if seq != 0 {
		return seq
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if cur, ok := x.cursors[cursorKey{c.Tenant, c.Subject, info.ID}]; ok && cur.incarnation == info.Incarnation {
		return cur.next
	}
	return max(info.FirstSeq, 1)
}

// keep remembers where res left off, for the next call that names no
// seq; a cursor only moves forward (two calls at once both read from the
// same place). Past maxCursors, those of executions that are gone go
// first, then any, down to three quarters: a call whose cursor was
// dropped reads from the first event retained, again rather than lost.
func (x *agentExec) keep(c auth.Claims, res wire.ExecResult) {
	x.mu.Lock()
	defer x.mu.Unlock()
	k := cursorKey{c.Tenant, c.Subject, res.ID}
	if cur, ok := x.cursors[k]; ok {
		if cur.incarnation != res.Incarnation || res.NextSeq > cur.next {
			x.cursors[k] = cursor{res.Incarnation, res.NextSeq}
		}
		return
	}
	if len(x.cursors) >= maxCursors {
		sup := x.s.cfg.Supervisor
		for k := range x.cursors {
			if _, err := sup.Get(k.tenant, k.id); err != nil {
				delete(x.cursors, k)
			}
		}
		for k := range x.cursors {
			if len(x.cursors) < maxCursors*3/4 {
				break
			}
			delete(x.cursors, k)
		}
	}
	x.cursors[k] = cursor{res.Incarnation, res.NextSeq}
}

// exitOf is how an ended execution ended, from its exit event (the
// newest, so retained).
func (x *agentExec) exitOf(tenant string, info session.Info) *wire.ExecExit {
	sub, _, err := x.s.cfg.Supervisor.Attach(tenant, info.ID, info.LastSeq-1)
	if err == nil {
		defer sub.Close()
		evs, _, ok, _ := sub.TryNext()
		for _, ev := range evs {
			if ok && ev.Kind == replay.KindExit {
				return &wire.ExecExit{Code: ev.Exit.Code, Signal: signalName(ev.Exit.Signal), Reason: ev.Exit.Reason}
			}
		}
	}
	r := info.Result
	return &wire.ExecExit{Code: r.ExitCode, Signal: r.Signal, Reason: string(r.Status)}
}

// agentYield is how long the owner of an agent exec call (route pattern,
// JSON body) may wait before it answers: its yield; zero for any other
// route.
func agentYield(pattern string, body []byte) time.Duration {
	if pattern != "POST /v1/exec" && pattern != "POST /v1/executions/{id}/write" {
		return 0
	}
	var w wire.Wait
	json.Unmarshal(body, &w) // a body that is not one is refused by the owner at once
	return w.Yield()
}

// mayWrite refuses an exec request's stdin without the scope or beyond
// the subject's input rate.
func (x *agentExec) mayWrite(c auth.Claims, body wire.ExecRequest) error {
	switch {
	case body.Stdin == "" && !body.CloseStdin:
		return nil
	case !c.Has(auth.ScopeWrite):
		return &apiError{wire.CodeForbidden, "stdin needs the " + auth.ScopeWrite + " scope"}
	case !x.s.inputs.allow(c):
		return errAgentInputRate
	}
	return nil
}

// checkContinue refuses start options on a continue (an id with no argv
// or command).
func checkContinue(b wire.ExecRequest) error {
	if b.Cwd != "" || b.Env != nil || b.TTY || b.Interactive || b.WorkspaceReadOnly || b.Mounts != nil || b.Proc != "" ||
		b.ResultMaxOutputBytes != 0 || b.RetentionMS != 0 || b.Rows != 0 || b.Cols != 0 || b.TimeoutMS != 0 || b.Limits != nil || b.Network != "" {
		return badRequest("a continue (an id with no argv or command) takes no start options")
	}
	return nil
}

// hold takes a place of the subject's budget of connections and long
// polls for a call that may wait, as an events long poll does.
func (x *agentHTTP) hold(c auth.Claims, w wire.Wait) (release func(), err error) {
	if w.Yield() == 0 {
		return func() {}, nil
	}
	if err := x.s.admit(subjectKey(c)); err != nil {
		if errors.Is(err, errSubjectBusy) {
			return nil, &apiError{wire.CodeTooManyConnections, fmt.Sprintf("at most %d connections, long polls and agent exec waits per subject; retry when one ends", x.s.cfg.MaxConnsPerSubject)}
		}
		return nil, err
	}
	return func() { x.s.release(subjectKey(c)) }, nil
}
