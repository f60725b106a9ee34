package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/cluster"
	"github.com/termgate/termgate/gateway/wire"
)

// MaxAgentCalls bounds a connection's exec and write requests waiting at
// once.
const MaxAgentCalls = 16

// agentCalls are a connection's exec and write requests under way, each
// waiting on a goroutine of its own (the wait must not hold the read
// loop); the connection's end ends their waits and waits for them.
type agentCalls struct {
	mu sync.Mutex
	n  int
	wg sync.WaitGroup
}

// agentCall answers an exec or write request with MsgExecResult when its
// wait ends, or with an error.
func (c *conn) agentCall(req wire.Request) {
	scope := auth.ScopeAttach // a continue reads; a start needs exec:create too
	if req.Type == wire.TypeWrite {
		scope = auth.ScopeWrite
	}
	if !c.need(req, scope) {
		return
	}
	var w wire.Wait
	if req.Type == wire.TypeExec {
		w = req.Exec.Wait
	} else {
		w = req.Write.Wait
	}
	if err := checkWait(w); err != nil {
		c.failErr(req, 0, err)
		return
	}
	a := &c.calls
	a.mu.Lock()
	if a.n >= MaxAgentCalls || c.ctx.Err() != nil {
		a.mu.Unlock()
		c.fail(req, 0, wire.CodeCapacity, fmt.Sprintf("at most %d exec and write requests wait at once on a connection", MaxAgentCalls))
		return
	}
	a.n++
	a.wg.Add(1)
	a.mu.Unlock()
	go func() {
		defer func() {
			a.mu.Lock()
			a.n--
			a.mu.Unlock()
			a.wg.Done()
		}()
		res, err := c.runAgentCall(req)
		switch {
		case err == errAnswered:
		case err != nil:
			c.failErr(req, 0, err)
		default:
			c.send(wire.Message{Type: wire.MsgExecResult, Req: req.Req, ID: res.ID, Result: &res})
		}
	}()
}

// errAnswered: the call was refused, and the refusal sent.
var errAnswered = &apiError{wire.CodeInternal, "answered"}

// runAgentCall runs an exec or write request on this node, or on the
// node its execution has (or its start is placed on).
func (c *conn) runAgentCall(req wire.Request) (wire.ExecResult, error) {
	x, claims := c.s.agent, c.currentClaims()
	if req.Type == wire.TypeWrite {
		if node, local, err := c.agentNode(req.ID); err != nil || !local {
			return c.agentElsewhere(node, err, http.MethodPost, "/v1/executions/"+url.PathEscape(req.ID)+"/write", req.Write.Wait, req.Write)
		}
		info, err := c.s.cfg.Supervisor.Get(claims.Tenant, req.ID)
		if err != nil {
			return wire.ExecResult{}, err
		}
		if !c.s.inputs.allow(claims) {
			return wire.ExecResult{}, errAgentInputRate
		}
		if err := c.agentInput(req.ID, req.Write.Offset, req.Write.Input, req.Write.CloseStdin); err != nil {
			return wire.ExecResult{}, err
		}
		return x.wait(c.ctx, claims, info, req.Write.Wait)
	}
	body := *req.Exec
	if body.Argv == nil && body.Command == "" { // a continue
		if body.ID == "" {
			return wire.ExecResult{}, badRequest("exec needs argv or command, or the id of an execution to continue")
		}
		if err := checkContinue(body); err != nil {
			return wire.ExecResult{}, err
		}
		if node, local, err := c.agentNode(body.ID); err != nil || !local {
			return c.agentElsewhere(node, err, http.MethodPost, "/v1/exec", body.Wait, body)
		}
		info, err := c.s.cfg.Supervisor.Get(claims.Tenant, body.ID)
		if err != nil {
			return wire.ExecResult{}, err
		}
		if err := c.agentStdin(body, nil); err != nil {
			return wire.ExecResult{}, err
		}
		return x.wait(c.ctx, claims, info, body.Wait)
	}
	start, err := startOf(body)
	if err != nil {
		return wire.ExecResult{}, err
	}
	if code, msg := c.denied(auth.ScopeCreate); code != "" { // before a placement asks other nodes
		return wire.ExecResult{}, &apiError{code, msg}
	}
	if err := x.mayWrite(claims, body); err != nil { // before the start: a refusal starts nothing
		return wire.ExecResult{}, err
	}
	start.Req = req.Req
	if rt := c.s.route; rt != nil {
		plan, err := rt.placeStart(c.relay.peerContext(), claims, start, nil)
		if err != nil {
			return wire.ExecResult{}, err
		}
		if start.ID = plan.ID; plan.Node != rt.self() {
			body.ID = plan.ID
			return c.agentElsewhere(plan.Node, nil, http.MethodPost, "/v1/exec", body.Wait, body)
		}
	}
	info, ok := c.startHere(start)
	if !ok {
		return wire.ExecResult{}, errAnswered
	}
	body.ID = info.ID
	if err := c.agentStdin(body, ptr(uint64(0))); err != nil {
		return wire.ExecResult{}, err
	}
	return x.wait(c.ctx, claims, info, body.Wait)
}

// agentStdin writes an exec request's stdin, as write does: a
// continue's (offset nil) once mayWrite allows it; a start's was checked
// before the start.
func (c *conn) agentStdin(body wire.ExecRequest, offset *uint64) error {
	if body.Stdin == "" && !body.CloseStdin {
		return nil
	}
	if offset == nil {
		if err := c.s.agent.mayWrite(c.currentClaims(), body); err != nil {
			return err
		}
	}
	return c.agentInput(body.ID, offset, body.Stdin, body.CloseStdin)
}

// agentInput records input, and writes it.
func (c *conn) agentInput(id string, offset *uint64, input string, closeStdin bool) error {
	claims := c.currentClaims()
	if c.s.cfg.Audit != nil && (input != "" || closeStdin) {
		rec := c.who("input")
		rec.Execution = id
		n := uint64(len(input))
		rec.InputBytes = &n
		if closeStdin {
			rec.Reason = wire.TypeCloseStdin
		}
		if c.s.cfg.Audit.Record(rec) != nil {
			return &apiError{wire.CodeUnavailable, unavailableText}
		}
	}
	_, err := c.s.agent.input(claims, id, offset, input, closeStdin)
	return err
}

// agentNode is the node that has execution id; local when it is this
// one (or there is one node).
func (c *conn) agentNode(id string) (node string, local bool, err error) {
	rt := c.s.route
	if rt == nil {
		return "", true, nil
	}
	node, err = rt.owner(c.relay.peerContext(), c.currentClaims(), id)
	return node, err == nil && node == rt.self(), err
}

// agentElsewhere makes the call on node through its HTTP API, with the
// connection's token, and waits as long as the call's yield; or returns
// err, why the node was not found.
func (c *conn) agentElsewhere(node string, err error, method, path string, w wire.Wait, body any) (wire.ExecResult, error) {
	if err != nil {
		return wire.ExecResult{}, err
	}
	rt := c.s.route
	b, err := json.Marshal(body)
	if err != nil {
		return wire.ExecResult{}, err
	}
	ctx := cluster.ExtendHeaderTimeout(c.relay.peerContext(), w.Yield())
	status, answer, err := rt.peerDo(ctx, method, node, path, tokenFrom(ctx), cluster.OpLocal, c.remote, b)
	if err != nil {
		return wire.ExecResult{}, err
	}
	if status/100 != 2 {
		var e apiErrorBody
		if json.Unmarshal(answer, &e) != nil || e.Error == "" {
			return wire.ExecResult{}, rt.unavailable(node, fmt.Errorf("gateway: agent exec on %s: status %d", node, status))
		}
		return wire.ExecResult{}, &apiError{e.Error, e.Message}
	}
	var res wire.ExecResult
	if err := json.Unmarshal(answer, &res); err != nil {
		return wire.ExecResult{}, rt.unavailable(node, fmt.Errorf("gateway: agent exec on %s: %w", node, err))
	}
	return res, nil
}

// wait ends the connection's calls' waits (its context is done) and
// waits for them.
func (a *agentCalls) wait() { a.wg.Wait() }
