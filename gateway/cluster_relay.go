package gateway

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session"
)

// The relay serves a client connection's channels on executions that
// other nodes own. For each such node the connection opens one upstream
// WebSocket and copies frames both ways, changing only request ids and
// channel numbers. Sequence numbers, offsets, acks, input offsets and
// incarnations pass untouched, so delivery stays exactly-once end to end
// between the client and the owner: the relay never acks, never makes up
// an input-ack, never reorders within an upstream (one reader, one FIFO)
// and never keeps a channel whose frames it may have lost. A failed
// upstream detaches each of its channels with error unavailable and
// retry_ms, after what was already queued; the client resumes with
// attach on the same connection.

// relay is a connection's relay: its channels on executions of other
// nodes, one upstream per owner node, and their FIFO into the writer. A
// conn has one only on a node of a cluster (newRelay); its read loop asks
// it first (serve, input). The maps are guarded by the conn's mu, which
// also numbers the channels, local and relayed alike; they are made with
// the first upstream, the FIFO with the first frame queued (fifo): most
// connections never relay.
type relay struct {
	c       *conn
	token   string // the raw bearer, for upstream dials and reauth; never logged
	relayed map[uint32]*relayChannel
	streams map[uint32]*relayStream // forward streams served by upstreams, by client number
	ups     map[string]*upstream
	q       atomic.Pointer[relayQueue] // nil until a frame is first queued
	wg      sync.WaitGroup             // the upstreams' goroutines
}

// newRelay returns c's relay, which dials upstreams with token; nil on a
// single node.
func newRelay(c *conn, token string) *relay {
	if c.s.route == nil {
		return nil
	}
	return &relay{c: c, token: token}
}

// channelsLocked counts the relayed channels (c.mu held), which the
// connection's channel limit counts with its own; 0 for a nil relay.
func (r *relay) channelsLocked() int {
	if r == nil {
		return 0
	}
	return len(r.relayed)
}

// Relay bounds.
const (
	// relayQueueFrames bounds the frames upstream readers queued for the
	// connection's writer.
	relayQueueFrames = 64
	// relayQueueBytes bounds the bytes they queued: a slow client blocks
	// the upstream readers and TCP pushes back to the owners.
	relayQueueBytes = 4 << 20
)

// relayFrame is one message an upstream reader queued for the client;
// buf, when set, holds b and goes back to relayBuffers once written.
type relayFrame struct {
	typ websocket.MessageType
	b   []byte
	buf *[]byte
}

// relayBuffers are the upstream readers' message buffers: an output
// frame is read into one and written to the client from it, so relaying
// it allocates nothing.
var relayBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// putRelayBuffer returns buf to relayBuffers unless a large message (a
// snapshot) grew it: the pool keeps only frame-sized buffers.
func putRelayBuffer(buf *[]byte) {
	if cap(*buf) <= 1<<20 {
		relayBuffers.Put(buf)
	}
}

// upstream is one connection to an owner node, serving the channels one
// client connection has there. Its reader is the only goroutine that
// maps answers and channels back; its pinger notices a frozen owner.
type upstream struct {
	node   string
	ws     *websocket.Conn
	r      *relay
	ctx    context.Context // ends when the upstream fails or the conn ends
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	chans   map[uint32]uint32 // upstream channel -> client channel
	streams map[uint32]uint32 // upstream forward stream -> client stream
	pending map[string]*relayPending
	nextReq uint64
	retired bool // no longer in c.ups: take no new requests

	done chan struct{} // closed when the reader finished its notices
}

// relayPending is a request sent upstream and not yet answered.
type relayPending struct {
	clientReq string
	// startAttach: a start with attach, whose started is not its last
	// answer.
	startAttach bool
	// drop: the answer is the relay's own (a forwarded reauth).
	drop     bool
	readOnly bool
	ack      bool
	forward  bool          // a forward: its forwarded names a stream to map
	answered chan struct{} // closed on the last answer; nil when nobody waits
}

// relayStream is a client's forward stream served by an upstream.
type relayStream struct {
	up uint32
	u  *upstream
}

// relayChannel is a client channel served by an upstream.
type relayChannel struct {
	id, up   uint32
	u        *upstream
	readOnly bool
	ack      bool
}

// relayHeader is what the relay reads of an owner's control message.
type relayHeader struct {
	Type     string `json:"type"`
	Req      string `json:"req"`
	Channel  uint32 `json:"channel"`
	Stream   uint32 `json:"stream"`
	ReadOnly bool   `json:"read_only"`
	Ack      bool   `json:"ack"`
}

// serve serves req through an upstream when it concerns an execution or
// channel of another node, and reports whether it did; it places every
// start (router.placeStart). A hop connection is always served locally:
// at most one hop.
func (r *relay) serve(req wire.Request) bool {
	switch {
	case req.Type == wire.TypeStart: // a hop's too: placeStart keeps it here, canonical
		r.start(req)
		return true
	case r.c.hop:
		return r.hopRefuse(req)
	}
	switch req.Type {
	case wire.TypeAttach:
		node, local := r.owner(req)
		if !local {
			r.attach(node, req)
		}
		return !local || node == ""
	case wire.TypeCancel:
		if req.Channel == 0 {
			node, local := r.owner(req)
			if !local {
				r.wait(node, req, &relayPending{})
			}
			return !local || node == ""
		}
	case wire.TypeReauth:
		r.reauth(req)
		return true
	case wire.TypePing:
		return false
	case wire.TypeForward:
		node, local := r.owner(req)
		if !local {
			r.wait(node, req, &relayPending{forward: true})
		}
		return !local || node == ""
	case wire.TypeForwardAck, wire.TypeForwardClose:
		return r.streamRequest(req)
	}
	return r.channelRequest(req)
}

// hopRefuse answers an attach or cancel by ID on a hop's connection that
// this node cannot serve, and reports whether it did: an ID naming this
// node under another epoch is gone (this node restarted without its
// state), one naming another node is unavailable (a hop is never relayed
// again). Everything else is served here.
func (r *relay) hopRefuse(req wire.Request) bool {
	if req.Type != wire.TypeAttach && (req.Type != wire.TypeCancel || req.Channel != 0) {
		return false
	}
	rt := r.c.s.route
	o, _, canonical, err := session.ParseID(req.ID)
	switch {
	case err != nil || !canonical:
		return false
	case o.Node != rt.self():
		r.fail(req, rt.unavailable(o.Node, errors.New("gateway: a hop for another node's execution")))
	case o.Epoch != rt.cfg.Owner.Epoch:
		r.c.failErr(req, 0, fmt.Errorf("%w: %s: this node restarted without its earlier state", session.ErrGone, req.ID))
	default:
		return false
	}
	return true
}

// owner finds the node owning req's execution: local when it is
// this node. A lookup that failed was answered: node is then "" (and
// local true).
func (r *relay) owner(req wire.Request) (node string, local bool) {
	rt := r.c.s.route
	node, err := rt.owner(r.peerContext(), r.c.currentClaims(), req.ID)
	if err != nil {
		r.fail(req, err)
		return "", true
	}
	return node, node == rt.self()
}

// start places a start (router.placeStart): here under the ID it
// gives, or relayed to the node it names.
func (r *relay) start(req wire.Request) {
	if !r.c.need(req, auth.ScopeCreate) {
		return
	}
	rt := r.c.s.route
	plan, err := rt.placeStart(r.peerContext(), r.c.currentClaims(), req, nil)
	if err != nil {
		r.fail(req, err)
		return
	}
	req.ID = plan.ID
	if plan.Node == rt.self() {
		r.c.start(req)
		return
	}
	r.wait(plan.Node, req, &relayPending{startAttach: req.Attach, readOnly: req.ReadOnly})
}

// peerContext carries the connection's token for the hops that routing
// makes on its behalf.
func (r *relay) peerContext() context.Context {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	return withToken(r.c.ctx, r.token)
}

// fail answers a request whose routing failed: unavailable with
// retry advice, or the session error (not_found, gone) as it is.
func (r *relay) fail(req wire.Request, err error) {
	var ue *errUnavailable
	if errors.As(err, &ue) {
		r.refuse(req.Req, ue.node, err)
		return
	}
	r.c.failErr(req, 0, err)
}

// attach attaches a channel on node, within the connection's channel
// limit, which counts local and relayed channels alike.
func (r *relay) attach(node string, req wire.Request) {
	r.c.mu.Lock()
	full := len(r.c.channels)+r.channelsLocked() >= r.c.s.cfg.MaxChannels
	r.c.mu.Unlock()
	if full {
		r.c.s.metrics.refuse(refusedChannels)
		r.c.fail(req, 0, wire.CodeTooManyChannels, fmt.Sprintf("at most %d channels per connection", r.c.s.cfg.MaxChannels))
		return
	}
	r.wait(node, req, &relayPending{readOnly: req.ReadOnly, ack: req.Ack})
}

// wait sends req to node's upstream and waits for its answer, so
// that answers keep the order of requests. An owner silent for Timeout
// fails its upstream, which answers req unavailable.
func (r *relay) wait(node string, req wire.Request, p *relayPending) {
	p.clientReq = req.Req
	p.answered = make(chan struct{})
	var u *upstream
	err := errRetired
	for i := 0; i < 2 && errors.Is(err, errRetired); i++ { // retired as idle meanwhile: dial anew, once
		if u, err = r.upstreamFor(node); err != nil {
			r.refuse(req.Req, node, err)
			return
		}
		err = u.send(req, p)
	}
	if errors.Is(err, errRetired) {
		r.refuse(req.Req, node, err)
		return
	}
	t := time.NewTimer(r.c.s.route.cfg.Timeout)
	defer t.Stop()
	select {
	case <-p.answered:
	case <-u.done:
	case <-t.C:
		u.fail(fmt.Errorf("no answer to %s within %s", req.Type, r.c.s.route.cfg.Timeout))
		<-u.done
	case <-r.c.ctx.Done():
	}
}

// channelRequest rewrites a request on a relayed channel to the
// owner's channel number and sends it; its answer comes back through the
// upstream reader. Requests on other channels are not the relay's.
func (r *relay) channelRequest(req wire.Request) bool {
	rc, ok := r.channel(req.Channel)
	if !ok {
		return false
	}
	req.Channel = rc.up
	if req.Type == wire.TypeAck && req.Req == "" {
		// The most frequent request, written without reflection.
		rc.u.write(websocket.MessageText, fmt.Appendf(nil, `{"type":"ack","channel":%d,"seq":%d}`, rc.up, req.Seq))
		return true
	}
	p := &relayPending{clientReq: req.Req}
	if req.Req == "" {
		p = nil // ack, and requests nobody waits for: a write only
	}
	rc.u.send(req, p)
	return true
}

// streamRequest sends a forward-ack or forward-close of a relayed stream
// upstream, its stream number rewritten; false for a stream of this node.
func (r *relay) streamRequest(req wire.Request) bool {
	r.c.mu.Lock()
	rs, ok := r.streams[req.Stream]
	r.c.mu.Unlock()
	if !ok {
		return false
	}
	req.Stream = rs.up
	rs.u.send(req, nil)
	return true
}

// forwardFrame sends a forward frame of a relayed stream upstream, its
// stream number (bytes 1..4) rewritten in place; false for a stream of
// this node.
func (r *relay) forwardFrame(b []byte, stream uint32) bool {
	r.c.mu.Lock()
	rs, ok := r.streams[stream]
	r.c.mu.Unlock()
	if !ok {
		return false
	}
	binary.BigEndian.PutUint32(b[1:5], rs.up)
	rs.u.write(websocket.MessageBinary, b)
	return true
}

// input forwards an input frame on a relayed channel, its channel
// number (bytes 1..4) rewritten in place; it reports whether it did.
func (r *relay) input(b []byte, in wire.Input) bool {
	rc, ok := r.channel(in.Channel)
	if !ok {
		return false
	}
	binary.BigEndian.PutUint32(b[1:5], rc.up)
	rc.u.write(websocket.MessageBinary, b)
	return true
}

// reauth verifies a reauth here, then hands the new token to every
// upstream, whose answers the relay consumes: each owner checks the token
// again for what it serves.
func (r *relay) reauth(req wire.Request) {
	r.c.reauth(req)
	if _, err := r.c.s.cfg.Auth.Verify(req.Token); err != nil || r.c.closing() {
		return
	}
	r.c.mu.Lock()
	r.token = req.Token
	ups := make([]*upstream, 0, len(r.ups))
	for _, u := range r.ups {
		ups = append(ups, u)
	}
	r.c.mu.Unlock()
	for _, u := range ups {
		u.send(wire.Request{Type: wire.TypeReauth, Req: "reauth", Token: req.Token}, &relayPending{drop: true})
	}
}

func (r *relay) channel(id uint32) (*relayChannel, bool) {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	rc, ok := r.relayed[id]
	return rc, ok
}

// refuse answers a request the relay could not send: the owner is
// not answering.
func (r *relay) refuse(req, node string, cause error) {
	var ue *errUnavailable
	if !errors.As(cause, &ue) {
		errors.As(r.c.s.route.unavailable(node, cause), &ue)
	}
	r.notice(wire.Message{Type: wire.MsgError, Req: req, Error: wire.CodeUnavailable, Message: ue.message(), RetryMS: ue.RetryMS()})
}

// upstreamFor returns the connection's upstream to node, dialling it the
// first time. Only the read loop calls it, so at most one dial runs.
func (r *relay) upstreamFor(node string) (*upstream, error) {
	r.c.mu.Lock()
	u, token := r.ups[node], r.token
	r.c.mu.Unlock()
	if u != nil {
		return u, nil
	}
	ws, err := r.c.s.route.dialUpstream(r.c.ctx, node, token, r.c.remote)
	if err != nil {
		return nil, err
	}
	uctx, ucancel := context.WithCancelCause(r.c.ctx)
	u = &upstream{node: node, ws: ws, r: r, ctx: uctx, cancel: ucancel,
		chans: map[uint32]uint32{}, streams: map[uint32]uint32{}, pending: map[string]*relayPending{}, done: make(chan struct{})}
	r.c.mu.Lock()
	r.makeLocked()
	r.ups[node] = u
	r.wg.Add(2)
	r.c.mu.Unlock()
	go func() { defer r.wg.Done(); u.reader() }()
	go func() { defer r.wg.Done(); u.pinger() }()
	return u, nil
}

// errRetired: the upstream was closed for being idle and took nothing.
var errRetired = errors.New("gateway: relay: upstream retired")

// send writes req upstream with its req rewritten to the relay's own, p
// waiting for the answer (nil: none expected). Once p is registered the
// reader answers it, unavailable if the write fails.
func (u *upstream) send(req wire.Request, p *relayPending) error {
	u.mu.Lock()
	if u.retired {
		u.mu.Unlock()
		return errRetired
	}
	req.Req = ""
	if p != nil {
		u.nextReq++
		req.Req = "r" + strconv.FormatUint(u.nextReq, 10)
		u.pending[req.Req] = p
	}
	u.mu.Unlock()
	b, err := json.Marshal(req)
	if err != nil {
		err = fmt.Errorf("encode %s: %w", req.Type, err)
		u.fail(err)
		return err
	}
	return u.write(websocket.MessageText, b)
}

// write sends one message upstream within Timeout; a failed write fails
// the upstream.
func (u *upstream) write(typ websocket.MessageType, b []byte) error {
	ctx, cancel := context.WithTimeout(u.ctx, u.r.c.s.route.cfg.Timeout)
	defer cancel()
	if err := u.ws.Write(ctx, typ, b); err != nil {
		err = fmt.Errorf("write: %w", err)
		u.fail(err)
		return err
	}
	return nil
}

// fail ends the upstream with cause; its reader then detaches every
// channel.
func (u *upstream) fail(cause error) {
	u.cancel(cause)
	u.ws.CloseNow()
}

// pinger pings the owner every PingInterval; a pong missing that long
// fails the upstream, so a frozen owner is noticed within two intervals.
func (u *upstream) pinger() {
	every := u.r.c.s.route.cfg.PingInterval
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-u.ctx.Done():
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(u.ctx, every)
			err := u.ws.Ping(ctx)
			cancel()
			if err != nil && u.ctx.Err() == nil {
				u.fail(fmt.Errorf("no pong within %s: %w", every, err))
				return
			}
		}
	}
}

// reader copies the owner's messages into the connection's FIFO, one at
// a time, and when the upstream ends detaches what is left.
func (u *upstream) reader() {
	defer close(u.done)
	var err error
	for {
		var typ websocket.MessageType
		var buf *[]byte
		if typ, buf, err = u.read(); err != nil {
			break
		}
		if !u.forward(typ, buf) {
			return // the client connection ended
		}
	}
	u.finish(err)
}

// read reads one message into a buffer of relayBuffers; the connection's
// read limit bounds it.
func (u *upstream) read() (websocket.MessageType, *[]byte, error) {
	typ, r, err := u.ws.Reader(u.ctx)
	if err != nil {
		return 0, nil, err
	}
	buf := relayBuffers.Get().(*[]byte)
	b := (*buf)[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			*buf = b
			return typ, buf, nil
		}
		if err != nil {
			putRelayBuffer(buf)
			return 0, nil, err
		}
	}
}

// forward rewrites one owner message for the client and queues it.
func (u *upstream) forward(typ websocket.MessageType, buf *[]byte) bool {
	b := *buf
	if typ == websocket.MessageBinary {
		u.mu.Lock()
		n, ok := uint32(0), false
		switch {
		case len(b) >= 5 && b[0] == wire.FrameForward:
			n, ok = u.streams[binary.BigEndian.Uint32(b[1:5])]
		case len(b) >= 5:
			n, ok = u.chans[binary.BigEndian.Uint32(b[1:5])]
		}
		u.mu.Unlock()
		if !ok {
			putRelayBuffer(buf)
			return true // a channel the client detached
		}
		binary.BigEndian.PutUint32(b[1:5], n)
		return u.r.queueFlush(relayFrame{typ: typ, b: b, buf: buf})
	}
	out, ok := u.rewrite(b)
	putRelayBuffer(buf)
	if !ok {
		return true
	}
	return u.r.queueFlush(relayFrame{typ: websocket.MessageText, b: out})
}

// queueFlush queues f and writes what waits from the calling upstream
// reader.
func (r *relay) queueFlush(f relayFrame) bool {
	if !r.queue(f) {
		return false
	}
	r.c.w.flush()
	return true
}

// rewrite maps an owner's control message to the client's request id and
// channel number, registering channels as they are attached and dropping
// them at exit or detached. It reports false for what the client must not
// see: the relay's own answers, messages of unknown channels, and the
// owner's auth warnings (this node sends its own).
func (u *upstream) rewrite(b []byte) ([]byte, bool) {
	var h relayHeader
	var fields map[string]json.RawMessage
	if json.Unmarshal(b, &h) != nil || json.Unmarshal(b, &fields) != nil {
		return nil, false
	}
	if h.Type == wire.MsgAuthExpiring || h.Type == wire.MsgPong {
		return nil, false
	}
	u.mu.Lock()
	p := u.pending[h.Req]
	var client, stream uint32
	switch {
	case h.Type == wire.MsgForwarded && p != nil && p.forward:
		stream = u.forwardedLocked(h)
	case h.Stream != 0 && strings.HasPrefix(h.Type, "forward"):
		var ok bool
		if stream, ok = u.streams[h.Stream]; !ok {
			u.mu.Unlock()
			return nil, false
		}
		if h.Type == wire.MsgForwardEnd {
			u.dropStreamLocked(h.Stream)
		}
	case h.Type == wire.MsgAttached && p != nil:
		client = u.attachedLocked(h, p)
	case h.Channel != 0:
		var ok bool
		if client, ok = u.chans[h.Channel]; !ok {
			u.mu.Unlock()
			return nil, false
		}
		if h.Type == wire.MsgExit || h.Type == wire.MsgDetached {
			u.dropLocked(h.Channel)
		}
	}
	if p != nil && !(h.Type == wire.MsgStarted && p.startAttach) {
		delete(u.pending, h.Req)
		if p.answered != nil {
			close(p.answered)
		}
	}
	u.retireIfIdleLocked()
	u.mu.Unlock()
	if p != nil && p.drop {
		return nil, false
	}
	delete(fields, "req")
	if p != nil && p.clientReq != "" {
		fields["req"], _ = json.Marshal(p.clientReq)
	}
	if client != 0 {
		fields["channel"], _ = json.Marshal(client)
	}
	if stream != 0 {
		fields["stream"], _ = json.Marshal(stream)
	}
	out, err := json.Marshal(fields)
	return out, err == nil
}

// attachedLocked gives an attached channel its client number.
func (u *upstream) attachedLocked(h relayHeader, p *relayPending) uint32 {
	r, c := u.r, u.r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	n := c.next
	r.relayed[n] = &relayChannel{id: n, up: h.Channel, u: u, readOnly: h.ReadOnly, ack: h.Ack}
	u.chans[h.Channel] = n
	return n
}

// forwardedLocked gives a stream opened upstream its client number,
// from the connection's own numbering.
func (u *upstream) forwardedLocked(h relayHeader) uint32 {
	n := u.r.c.forwardsOf().number()
	u.streams[h.Stream] = n
	u.r.c.mu.Lock()
	if u.r.streams == nil {
		u.r.streams = map[uint32]*relayStream{}
	}
	u.r.streams[n] = &relayStream{up: h.Stream, u: u}
	u.r.c.mu.Unlock()
	return n
}

// dropStreamLocked forgets an upstream stream.
func (u *upstream) dropStreamLocked(up uint32) {
	n := u.streams[up]
	delete(u.streams, up)
	u.r.c.mu.Lock()
	delete(u.r.streams, n)
	u.r.c.mu.Unlock()
}

// dropLocked forgets an upstream channel.
func (u *upstream) dropLocked(up uint32) {
	n := u.chans[up]
	delete(u.chans, up)
	u.r.c.mu.Lock()
	delete(u.r.relayed, n)
	u.r.c.mu.Unlock()
}

// retireIfIdleLocked closes an upstream that serves no channel and waits
// for no answer; the next request for its node dials anew.
func (u *upstream) retireIfIdleLocked() {
	if u.retired || len(u.chans) > 0 || len(u.streams) > 0 || len(u.pending) > 0 {
		return
	}
	u.retired = true
	r, c := u.r, u.r.c
	c.mu.Lock()
	if r.ups[u.node] == u {
		delete(r.ups, u.node)
	}
	r.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer r.wg.Done()
		u.ws.Close(websocket.StatusNormalClosure, "")
	}()
}

// finish runs when the upstream ended with err: every channel it served
// is detached unavailable and every request it owes is answered
// unavailable, after what was already queued. An owner's close for a
// token problem closes the client connection with the same code.
func (u *upstream) finish(err error) {
	r, c := u.r, u.r.c
	u.mu.Lock()
	retired := u.retired
	u.retired = true
	chans := make([]uint32, 0, len(u.chans))
	for up, n := range u.chans {
		chans = append(chans, n)
		delete(u.chans, up)
	}
	streams := make([]uint32, 0, len(u.streams))
	for up, n := range u.streams {
		streams = append(streams, n)
		delete(u.streams, up)
	}
	pending := u.pending
	u.pending = map[string]*relayPending{}
	u.mu.Unlock()
	c.mu.Lock()
	if r.ups[u.node] == u {
		delete(r.ups, u.node)
	}
	for _, n := range chans {
		delete(r.relayed, n)
	}
	for _, n := range streams {
		delete(r.streams, n)
	}
	c.mu.Unlock()
	u.cancel(err)
	u.ws.CloseNow()
	code := websocket.CloseStatus(err)
	if code == wire.CloseAuthExpired || code == websocket.StatusPolicyViolation {
		c.close(code, "the owner node refused the token")
		return
	}
	for _, n := range sortedChannels(streams) {
		r.notice(wire.Message{Type: wire.MsgForwardEnd, Stream: n, Reason: wire.ForwardReset})
	}
	if retired && len(chans) == 0 && len(pending) == 0 {
		return // closed for being idle
	}
	retry := unavailableRetry.Milliseconds()
	if code == wire.CloseServiceRestart {
		retry = restartRetry.Milliseconds()
	}
	text := (&errUnavailable{node: u.node}).message()
	c.log.Info("upstream ended", "node", u.node, "channels", len(chans), "err", context.Cause(u.ctx))
	for _, p := range pending {
		if p.answered != nil {
			close(p.answered)
		}
		if !p.drop && (p.answered != nil || p.clientReq != "") {
			r.notice(wire.Message{Type: wire.MsgError, Req: p.clientReq, Error: wire.CodeUnavailable, Message: text, RetryMS: retry})
		}
	}
	for _, n := range sortedChannels(chans) {
		r.notice(wire.Message{Type: wire.MsgDetached, Channel: n, Error: wire.CodeUnavailable, Message: text, RetryMS: retry})
	}
}

// sortedChannels orders channel numbers, so notices come in attach order.
func sortedChannels(ns []uint32) []uint32 {
	for i := 1; i < len(ns); i++ {
		for j := i; j > 0 && ns[j] < ns[j-1]; j-- {
			ns[j], ns[j-1] = ns[j-1], ns[j]
		}
	}
	return ns
}

// notice queues a message of the relay's own behind the upstreams'.
func (r *relay) notice(n wire.Message) {
	b, err := json.Marshal(n)
	if err != nil {
		r.c.log.Error("encode relay notice", "err", err)
		return
	}
	if r.queue(relayFrame{typ: websocket.MessageText, b: b}) {
		r.c.w.kick()
	}
}

// relayQueue is a connection's relay FIFO: the frames its upstream readers
// queued for the client, within a frame and a byte budget.
type relayQueue struct {
	out   chan relayFrame
	bytes *byteBudget
}

// makeLocked makes the relay's maps the first time an upstream is
// added; the conn's mu is held.
func (r *relay) makeLocked() {
	if r.ups != nil {
		return
	}
	r.ups = map[string]*upstream{}
	r.relayed = map[uint32]*relayChannel{}
}

// fifo returns the connection's relay FIFO, making it the first time
// a frame is queued: by an upstream reader or the relay's own notice.
func (r *relay) fifo() *relayQueue {
	if q := r.q.Load(); q != nil {
		return q
	}
	q := &relayQueue{out: make(chan relayFrame, relayQueueFrames), bytes: newByteBudget(relayQueueBytes)}
	if r.q.CompareAndSwap(nil, q) {
		return q
	}
	return r.q.Load()
}

// queue puts f into the connection's relay FIFO within its frame and byte
// budget, waiting while it is full; false when the connection ended.
func (r *relay) queue(f relayFrame) bool {
	q := r.fifo()
	if !q.bytes.acquire(r.c.ctx, len(f.b)) {
		return false
	}
	select {
	case q.out <- f:
		r.c.w.want() // the caller flushes or kicks
		return true
	case <-r.c.ctx.Done():
		return false
	}
}

// close ends every upstream of a connection that ends and waits
// for their goroutines.
func (r *relay) close() {
	r.c.mu.Lock()
	ups := make([]*upstream, 0, len(r.ups))
	for _, u := range r.ups {
		ups = append(ups, u)
	}
	r.c.mu.Unlock()
	for _, u := range ups {
		u.fail(context.Cause(r.c.ctx))
	}
	r.wg.Wait()
}

// byteBudget is a counting semaphore of bytes. A request larger than the
// whole budget takes the whole budget.
type byteBudget struct {
	mu   sync.Mutex
	size int
	free int
	wake chan struct{} // closed and replaced on every release
}

func newByteBudget(size int) *byteBudget {
	return &byteBudget{size: size, free: size, wake: make(chan struct{})}
}

func (b *byteBudget) clamp(n int) int { return min(n, b.size) }

// acquire takes n bytes, waiting until they are free or ctx ends.
func (b *byteBudget) acquire(ctx context.Context, n int) bool {
	n = b.clamp(n)
	for {
		b.mu.Lock()
		if b.free >= n {
			b.free -= n
			b.mu.Unlock()
			return true
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return false
		}
	}
}

// release gives back n bytes taken by acquire.
func (b *byteBudget) release(n int) {
	b.mu.Lock()
	b.free += b.clamp(n)
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}
