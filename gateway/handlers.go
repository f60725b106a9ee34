package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unsafe"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session"
)

// handle answers one control message. Every message is authorised by the
// connection's current claims, not only the handshake.
func (c *conn) handle(req wire.Request) {
	if c.relay != nil && c.relay.serve(req) {
		return
	}
	switch req.Type {
	case wire.TypePing:
		c.send(wire.Message{Type: wire.MsgPong, Req: req.Req})
	case wire.TypeReauth:
		c.reauth(req)
	case wire.TypeStart:
		c.start(req)
	case wire.TypeAttach:
		c.attach(req, req.ID, req.After, req.ReadOnly)
	case wire.TypeDetach:
		c.detachChannel(req)
	case wire.TypeAck:
		c.ack(req)
	case wire.TypeNetwork:
		c.network(req)
	case wire.TypeForward:
		c.forward(req)
	case wire.TypeForwardAck:
		c.forwardAck(req)
	case wire.TypeForwardClose:
		c.forwardClose(req)
	case wire.TypeExec, wire.TypeWrite:
		c.agentCall(req)
	default:
		c.modify(req)
	}
}

// need checks a scope; a missing scope is answered, not fatal.
func (c *conn) need(req wire.Request, scope string) bool {
	code, msg := c.denied(scope)
	if code == "" {
		return true
	}
	c.fail(req, req.Channel, code, msg)
	return false
}

// denied is the code and message refusing a request that needs scope,
// or empty when the connection's current token allows it.
func (c *conn) denied(scope string) (code, msg string) {
	claims := c.currentClaims()
	switch {
	case !time.Now().Before(claims.ExpiresAt):
		return wire.CodeUnauthorized, "the token expired; reauth or reconnect"
	case !claims.Has(scope):
		return wire.CodeForbidden, "the token lacks the " + scope + " scope"
	}
	return "", ""
}

func (c *conn) start(req wire.Request) {
	info, ok := c.startHere(req)
	if !ok {
		return
	}
	c.send(wire.Message{Type: wire.MsgStarted, Req: req.Req, ID: info.ID, Status: string(info.Status), PTY: info.PTY})
	if req.Attach {
		c.attach(req, info.ID, 0, false)
	}
}

// startHere starts req's execution on this node; a refusal is answered
// (false).
func (c *conn) startHere(req wire.Request) (session.Info, bool) {
	if !c.need(req, auth.ScopeCreate) {
		return session.Info{}, false
	}
	if !c.s.starts.allow(c.currentClaims()) {
		c.fail(req, 0, wire.CodeRateLimited, "too many starts; slow down")
		return session.Info{}, false
	}
	claims := c.currentClaims()
	if err := c.s.admitting(); err != nil {
		c.failErr(req, 0, err)
		return session.Info{}, false
	}
	spec, err := c.s.spec(claims.Tenant, req)
	if err != nil {
		c.failErr(req, 0, err)
		return session.Info{}, false
	}
	if code, msg := c.s.recordStart(claims, req, &spec); code != "" {
		c.fail(req, 0, code, msg)
		return session.Info{}, false
	}
	if code, msg := mayUseNetwork(claims, req.Network); code != "" {
		c.fail(req, 0, code, msg)
		return session.Info{}, false
	}
	if !c.auditStart(&req, spec) {
		return session.Info{}, false
	}
	who := session.WithLogAttrs(c.ctx, "subject", claims.Subject, "remote_addr", c.remote)
	info, err := c.s.cfg.Supervisor.Start(who, claims.Tenant, req.ID, spec)
	if err != nil {
		c.failErr(req, 0, err)
		return session.Info{}, false
	}
	return info, true
}

// attach subscribes a new channel to an execution. Without exec:write the
// channel is read-only whatever the client asked. A non-zero after needs
// the incarnation it belongs to.
func (c *conn) attach(req wire.Request, id string, after uint64, readOnly bool) {
	claims := c.currentClaims()
	if !c.need(req, auth.ScopeAttach) {
		return
	}
	if after > 0 && req.Incarnation == "" {
		// after alone cannot say which execution it counts in: the ID may
		// name a new one since (reused after retention), whose first
		// events would be skipped with no gap.
		c.fail(req, 0, wire.CodeInvalidAfter, fmt.Sprintf("after %d needs the incarnation it belongs to (from the attached it came with), or after 0", after))
		return
	}
	readOnly = readOnly || !claims.Has(auth.ScopeWrite)
	c.mu.Lock()
	full := len(c.channels)+c.relay.channelsLocked() >= c.s.cfg.MaxChannels
	c.mu.Unlock()
	if full {
		c.s.metrics.refuse(refusedChannels)
		c.fail(req, 0, wire.CodeTooManyChannels, fmt.Sprintf("at most %d channels per connection", c.s.cfg.MaxChannels))
		return
	}
	if !c.auditAttach(req, id, after, readOnly) {
		return
	}
	if err := c.s.openChannel(); err != nil {
		c.failErr(req, 0, err)
		return
	}
	opts := session.AttachOptions{After: after, Incarnation: req.Incarnation, Writer: !readOnly, Ack: req.Ack, Snapshot: req.Snapshot}
	if req.Ack {
		opts.Seen = &req.Seen // a client that acknowledges counts what it saw
	}
	sub, info, err := c.s.cfg.Supervisor.Subscribe(claims.Tenant, id, opts)
	if err != nil {
		c.s.closeChannel()
		c.failErr(req, 0, err)
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	ch := &channel{execID: info.ID, readOnly: readOnly, pty: info.PTY, ack: req.Ack && !readOnly, sub: sub, ctx: ctx, detach: cancel}
	ch.sent.Store(sub.After()) // the client has those: it may ack them again
	c.mu.Lock()
	c.next++
	ch.id = c.next
	c.channels[ch.id] = ch
	c.open[ch] = struct{}{}
	c.mu.Unlock()
	c.send(wire.Message{
		Type: wire.MsgAttached, Req: req.Req, Channel: ch.id, ID: info.ID, Status: string(info.Status), PTY: info.PTY,
		FirstSeq: info.FirstSeq, LastSeq: info.LastSeq, InputOffset: info.InputOffset, ReadOnly: readOnly,
		Incarnation: info.Incarnation, Ack: sub.Holds(), Flow: flowName(info.Live),
	})
	if snap := sub.Snapshot(); snap != nil {
		c.sendSnapshot(ch.id, snap, sub.LossCause())
	}
	c.w.startChannel(ch)
	if req.Ports {
		c.watchPorts(req, ch, claims.Tenant)
	}
}

// watchPorts has ch told its execution's ports, or answers why not.
func (c *conn) watchPorts(req wire.Request, ch *channel, tenant string) {
	c.mu.Lock()
	ch.ports = !ch.finished
	c.mu.Unlock()
	if !ch.ports {
		return
	}
	if !c.s.ports.watch(c, ch, tenant) {
		c.mu.Lock()
		ch.ports = false
		c.mu.Unlock()
		c.fail(req, ch.id, wire.CodeCapacity, fmt.Sprintf("the server watches the ports of %d executions already; poll GET /v1/executions/{id}/ports", MaxPortWatches))
	}
}

// sendSnapshot queues a snapshot encoded at once, its data never copied
// into a string of its own. One larger than a message may be, or beyond
// the bytes the connection or its subject may have queued, is sent as
// the gap it stands in for: the client knows what it lacks, and the
// channel continues after it all the same.
func (c *conn) sendSnapshot(channel uint32, snap *session.Snapshot, cause string) {
	m := wire.Message{
		Type: wire.MsgSnapshot, Channel: channel, Seq: snap.Seq, Seen: snap.Seen, Rows: snap.Rows, Cols: snap.Cols,
		Data: unsafe.String(unsafe.SliceData(snap.Data), len(snap.Data)), // read-only: the final screen is shared
		From: snap.From, To: snap.To, Bytes: snap.Bytes, Inexact: snap.Inexact, Cause: cause,
	}
	b, err := json.Marshal(m)
	if err == nil && int64(len(b)) <= c.s.cfg.MaxMessageBytes && c.w.control.addEncoded(b) {
		c.w.kick()
		return
	}
	c.s.metrics.refuse(refusedSnapshot)
	c.send(wire.Message{Type: wire.MsgGap, Channel: channel, From: snap.From, To: snap.To, Bytes: snap.Bytes, Inexact: snap.Inexact, Cause: cause})
}

// flowName is an execution's flow on the wire.
func flowName(live bool) string {
	if live {
		return wire.FlowLive
	}
	return wire.FlowHold
}

func (c *conn) detachChannel(req wire.Request) {
	ch, ok := c.channel(req.Channel)
	if !ok {
		c.fail(req, req.Channel, wire.CodeNotAttached, "no such channel")
		return
	}
	ch.detach()
	c.dropChannel(ch.id)
	c.send(wire.Message{Type: wire.MsgDetached, Req: req.Req, Channel: ch.id})
	c.w.wake(ch) // the writer finishes it

}

// writable returns the channel of a request that changes an execution.
func (c *conn) writable(req wire.Request, id uint32) (*channel, bool) {
	if !c.need(req, auth.ScopeWrite) {
		return nil, false
	}
	ch, ok := c.channel(id)
	if !ok {
		c.fail(req, id, wire.CodeNotAttached, "no such channel")
		return nil, false
	}
	if ch.readOnly {
		c.fail(req, id, wire.CodeReadOnly, "the channel is read-only")
		return nil, false
	}
	return ch, true
}

// modify handles close-stdin, resize, signal and cancel.
func (c *conn) modify(req wire.Request) {
	tenant := c.currentClaims().Tenant
	sup := c.s.cfg.Supervisor
	if req.Type == wire.TypeCancel && req.Channel == 0 {
		if c.need(req, auth.ScopeWrite) && c.auditCancelID(req) {
			c.answer(req, 0, sup.Cancel(tenant, req.ID))
		}
		return
	}
	ch, ok := c.writable(req, req.Channel)
	if !ok || !c.withinResizeRate(req, ch) || !c.auditModify(req, ch) {
		return
	}
	var err error
	switch req.Type {
	case wire.TypeCloseStdin:
		if req.InputOffset == nil {
			err = sup.CloseStdin(tenant, ch.execID)
			break
		}
		var received uint64
		if received, err = sup.CloseStdinAfter(tenant, ch.execID, *req.InputOffset); err != nil {
			code, msg := c.errorText(req, err)
			c.send(wire.Message{Type: wire.MsgError, Req: req.Req, Channel: ch.id, Error: code, Message: msg, InputOffset: received})
			return
		}
	case wire.TypeResize:
		err = sup.Resize(tenant, ch.execID, req.Rows, req.Cols)
	case wire.TypeSignal:
		err = sup.Signal(tenant, ch.execID, req.Signal)
	case wire.TypeCancel:
		err = sup.Cancel(tenant, ch.execID)
	}
	c.answer(req, ch.id, err)
}

// withinResizeRate takes a resize or signal out of its subject's rate
// (Config.ResizesPerSecond) and refuses it when none is left. Requests
// with a req are always answered; of those without, only the first
// refused after an accepted one is, so a flood of them cannot flood the
// connection with errors.
func (c *conn) withinResizeRate(req wire.Request, ch *channel) bool {
	if req.Type != wire.TypeResize && req.Type != wire.TypeSignal {
		return true
	}
	if c.s.resizes.allow(c.currentClaims()) {
		ch.resizeRefused = false
		return true
	}
	if req.Req == "" {
		if ch.resizeRefused {
			return false
		}
		ch.resizeRefused = true
	}
	c.fail(req, ch.id, wire.CodeRateLimited, "too many resizes and signals; slow down")
	return false
}

// answer acknowledges a request that has no other answer.
func (c *conn) answer(req wire.Request, channel uint32, err error) {
	if err != nil {
		c.failErr(req, channel, err)
		return
	}
	if req.Req != "" {
		c.send(wire.Message{Type: wire.MsgOK, Req: req.Req, Channel: channel})
	}
}

// input applies a binary input frame. Offsets make retries harmless, so
// a full input queue is an answer, never a wait. On a channel attached
// with ack every frame is answered by a coalesced input-ack (refusals
// included, and only there). Otherwise a refusal says what the execution
// has received, and only the first after accepted input is sent: the
// frames a client sent meanwhile are refused silently, so a burst of them
// cannot flood the connection with errors.
func (c *conn) input(b []byte) {
	in, err := wire.DecodeInput(b)
	if err != nil {
		c.close(wire.CloseProtocolError, "malformed input frame")
		return
	}
	if c.relay != nil && c.relay.input(b, in) {
		return
	}
	if ch, ok := c.channel(in.Channel); ok && ch.ack {
		c.ackedInput(ch, in)
		return
	}
	req := wire.Request{Type: "input", Channel: in.Channel}
	ch, ok := c.writable(req, in.Channel)
	if !ok {
		return
	}
	received, code, msg := c.applyInput(req, ch, in)
	if code != "" {
		c.refuseInput(ch, received, code, msg)
		return
	}
	ch.inputRefused = false
}

// ackedInput applies a frame on an acknowledging channel and reports it,
// accepted or refused, through the channel's input-ack.
func (c *conn) ackedInput(ch *channel, in wire.Input) {
	var received uint64
	code, msg := c.denied(auth.ScopeWrite)
	if code == "" {
		received, code, msg = c.applyInput(wire.Request{Type: "input", Channel: ch.id}, ch, in)
	}
	c.w.inputAcks.add(ch.id, received, inputEnd(in), code, msg)
	if code != "" || c.w.writing.Load() {
		c.w.kick() // a refusal goes at once; one writing takes the ack anyway
		return
	}
	c.w.holdInputAck()
}

// applyInput hands a frame to the execution within the subject's input
// rate. It returns the input the execution has received and, when the
// frame was refused, the code and message saying why.
func (c *conn) applyInput(req wire.Request, ch *channel, in wire.Input) (received uint64, code, msg string) {
	defer func() { c.auditInput(ch, in, received, code) }()
	sup, tenant := c.s.cfg.Supervisor, c.currentClaims().Tenant
	if !c.s.inputs.allow(c.currentClaims()) {
		received, _ = sup.Input(tenant, ch.execID, 0, nil) // empty input only reads the offset
		return received, wire.CodeRateLimited, "too many input messages; resend from the execution's input offset"
	}
	if code, msg = c.auditFirstInput(ch); code != "" {
		received, _ = sup.Input(tenant, ch.execID, 0, nil)
		return received, code, msg
	}
	received, err := sup.Input(tenant, ch.execID, in.Offset, in.Data)
	if err != nil {
		code, msg = c.errorText(req, err)
		return received, code, msg
	}
	return received, "", ""
}

func (c *conn) refuseInput(ch *channel, received uint64, code, msg string) {
	if ch.inputRefused {
		return
	}
	ch.inputRefused = true
	c.send(wire.Message{Type: wire.MsgError, Channel: ch.id, Error: code, Message: msg, InputOffset: received})
}

// reauth replaces the connection's token with a fresh one for the same
// subject and tenant; anything else closes the connection.
func (c *conn) reauth(req wire.Request) {
	claims, err := c.s.cfg.Auth.Verify(req.Token)
	if err != nil {
		c.s.metrics.authFailed(req.Token, err)
		c.auditAuthFailed(req.Token, err)
		c.log.Info("reauth refused", "err", err)
		c.fail(req, 0, wire.CodeUnauthorized, "token refused")
		return
	}
	old := c.currentClaims()
	if claims.Subject != old.Subject || claims.Tenant != old.Tenant {
		c.close(websocket.StatusPolicyViolation, "reauth for another subject or tenant")
		return
	}
	c.mu.Lock()
	c.claims = claims
	c.mu.Unlock()
	if claims.ExpiresAt.After(old.ExpiresAt) {
		c.expiry.arm(c.currentClaims())
	} // else the warning stands: warning again at once would invite the same reauth
	c.send(wire.Message{Type: wire.MsgOK, Req: req.Req, ExpiresAt: claims.ExpiresAt.UTC().Format(time.RFC3339)})
}
