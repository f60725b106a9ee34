package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/cluster"
	"github.com/termgate/termgate/gateway/gatewaytest"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session/execid"
)

// relayNode is one node of a test cluster: a real gateway over the real
// sandbox, served on its own address, with a peer proxy in front of it
// that the other nodes dial (so a test can kill or freeze the node as
// its peers see it).
type relayNode struct {
	*testEnv
	name  string
	owner execid.Owner
	ts    *httptest.Server // what clients dial
	proxy *peerProxy       // what peers dial
}

// relayTestSecret is the test cluster's hop secret.
var relayTestSecret = []byte("relay-test-hop-secret-0123456789abcdef")

// relayPing is the upstream heartbeat in tests.
const relayPing = 250 * time.Millisecond

// newRelayCluster starts n nodes n0..n(n-1) with static peers; peerURL,
// when set, replaces the URL node from uses for node to.
func newRelayCluster(t testing.TB, n int, peerURL func(from, to int, url string) string) []*relayNode {
	t.Helper()
	return newRelayClusterWith(t, n, peerURL, nil)
}

// newRelayClusterWith is newRelayCluster with tweak adjusting each
// node's config.
func newRelayClusterWith(t testing.TB, n int, peerURL func(from, to int, url string) string, tweak func(i int, c *Config)) []*relayNode {
	t.Helper()
	nodes := make([]*relayNode, n)
	handlers := make([]atomic.Pointer[http.Handler], n)
	for i := range nodes {
		h := &handlers[i]
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if p := h.Load(); p != nil {
				(*p).ServeHTTP(w, r)
				return
			}
			http.Error(w, "starting", http.StatusServiceUnavailable)
		}))
		t.Cleanup(ts.Close)
		name := fmt.Sprintf("n%d", i)
		nodes[i] = &relayNode{name: name, owner: execid.Owner{Node: name, Epoch: execid.NewEpoch()}, ts: ts,
			proxy: newPeerProxy(t, strings.TrimPrefix(ts.URL, "http://"))}
	}
	for i, nd := range nodes {
		peers := map[string]string{}
		for j, o := range nodes {
			u := "http://" + o.proxy.addr()
			if peerURL != nil {
				u = peerURL(i, j, u)
			}
			peers[o.name] = u
		}
		members, err := cluster.NewStatic(nd.name, peers)
		if err != nil {
			t.Fatal(err)
		}
		signer, err := cluster.NewSigner(nd.name, relayTestSecret)
		if err != nil {
			t.Fatal(err)
		}
		nd.testEnv = newEnv(t, func(c *Config) {
			c.Cluster = &ClusterConfig{Owner: nd.owner, Members: members, Signer: signer,
				DialTimeout: 500 * time.Millisecond, Timeout: time.Second, PingInterval: relayPing}
			if tweak != nil {
				tweak(i, c)
			}
		})
		h := nd.srv.Handler()
		handlers[i].Store(&h)
	}
	return nodes
}

func (nd *relayNode) wsURL() string {
	return "ws" + strings.TrimPrefix(nd.ts.URL, "http") + "/v1/connect"
}

// id is the canonical ID of key on nd.
func (nd *relayNode) id(key string) string { return execid.Canonical(nd.owner, key) }

// dialNode connects a test client to nd.
func dialRelayNode(t testing.TB, nd *relayNode, tok string) *client {
	t.Helper()
	return dialWS(t, nd.wsURL(), tok)
}

// dialWS connects a test client to the /v1/connect URL u.
func dialWS(t testing.TB, u, tok string) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		Subprotocols: []string{wire.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(8 << 20)
	t.Cleanup(func() { ws.CloseNow() })
	return &client{ws: ws}
}

// relayMsg is a control message with the relay's retry advice.
type relayMsg struct {
	wire.Message
	RetryMS int64 `json:"retry_ms"`
}

// relayFrameIn is one frame a test client read.
type relayFrameIn struct {
	msg *relayMsg
	out *wire.Output
}

func readRelay(ctx context.Context, c *client) (relayFrameIn, error) {
	typ, b, err := c.ws.Read(ctx)
	if err != nil {
		return relayFrameIn{}, err
	}
	if typ == websocket.MessageBinary {
		o, err := wire.DecodeOutput(b)
		return relayFrameIn{out: &o}, err
	}
	var m relayMsg
	if err := json.Unmarshal(b, &m); err != nil {
		return relayFrameIn{}, err
	}
	return relayFrameIn{msg: &m}, nil
}

// nextMsg reads until a control message that match accepts, collecting
// the output of each channel on the way into out (when not nil).
func nextMsg(t *testing.T, c *client, out map[uint32]*bytes.Buffer, match func(*relayMsg) bool) relayMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		f, err := readRelay(ctx, c)
		if err != nil {
			t.Fatalf("reading: %v", err)
		}
		if f.out != nil {
			if out != nil {
				if out[f.out.Channel] == nil {
					out[f.out.Channel] = &bytes.Buffer{}
				}
				out[f.out.Channel].Write(f.out.Data)
			}
			continue
		}
		if match(f.msg) {
			return *f.msg
		}
	}
}

func isType(typ, req string) func(*relayMsg) bool {
	return func(m *relayMsg) bool { return m.Type == typ && (req == "" || m.Req == req) }
}

// TestRelayAttachRenumbersChannels: a connection to n0 holds a local
// channel and two on an execution of n1; the relayed ones get n0's
// numbers, their answers the client's request ids, and each channel's
// output goes to it alone while the channels interleave.
func TestRelayAttachRenumbersChannels(t *testing.T) {
	t.Parallel()
	nodes := newRelayCluster(t, 2, nil)
	n0, n1 := nodes[0], nodes[1]
	tok := n0.token(t, "acme", allScopes...)
	c := dialRelayNode(t, n0, tok)
	c.expect(t, wire.MsgHello)

	c.send(t, wire.Request{Type: wire.TypeStart, Req: "r1", ID: n0.id("here"), Command: "/bin/sh", Args: []string{"-c", "cat"}, Attach: true})
	nextMsg(t, c, nil, isType(wire.MsgStarted, "r1"))
	local := nextMsg(t, c, nil, isType(wire.MsgAttached, "r1"))
	// r1 again: the relay's own request ids must not leak or collide.
	c.send(t, wire.Request{Type: wire.TypeStart, Req: "r1", ID: n1.id("there"), Command: "/bin/sh", Args: []string{"-c", "cat"}, Attach: true})
	st := nextMsg(t, c, nil, isType(wire.MsgStarted, "r1"))
	remote := nextMsg(t, c, nil, isType(wire.MsgAttached, "r1"))
	c.send(t, wire.Request{Type: wire.TypeAttach, Req: "v", ID: n1.id("there"), ReadOnly: true})
	viewer := nextMsg(t, c, nil, isType(wire.MsgAttached, "v"))
	if st.ID != n1.id("there") || remote.ID != st.ID {
		t.Fatalf("started %q, attached %q; want %q", st.ID, remote.ID, n1.id("there"))
	}
	if local.Channel != 1 || remote.Channel != 2 || viewer.Channel != 3 || !viewer.ReadOnly {
		t.Fatalf("channels local %d, remote %d, viewer %d (read-only %v); want 1, 2, 3 (the owner numbers its own 1, 2)",
			local.Channel, remote.Channel, viewer.Channel, viewer.ReadOnly)
	}
	if _, err := n1.sup.Get("acme", st.ID); err != nil {
		t.Fatalf("%s on n1: %v", st.ID, err)
	}

	out := map[uint32]*bytes.Buffer{}
	var wantLocal, wantRemote strings.Builder
	var offLocal, offRemote uint64
	for i := range 20 {
		l, r := fmt.Sprintf("local-%d\n", i), fmt.Sprintf("remote-%d\n", i)
		c.sendInput(t, local.Channel, offLocal, l)
		c.sendInput(t, remote.Channel, offRemote, r)
		offLocal, offRemote = offLocal+uint64(len(l)), offRemote+uint64(len(r))
		wantLocal.WriteString(l)
		wantRemote.WriteString(r)
	}
	c.send(t, wire.Request{Type: wire.TypeCloseStdin, Req: "cl", Channel: local.Channel})
	c.send(t, wire.Request{Type: wire.TypeCloseStdin, Req: "cr", Channel: remote.Channel})
	exits, oks := map[uint32]bool{}, map[string]uint32{}
	for len(exits) < 3 || len(oks) < 2 {
		m := nextMsg(t, c, out, func(m *relayMsg) bool { return m.Type == wire.MsgExit || m.Type == wire.MsgOK })
		if m.Type == wire.MsgOK {
			oks[m.Req] = m.Channel
			continue
		}
		exits[m.Channel] = true
	}
	if oks["cl"] != local.Channel || oks["cr"] != remote.Channel {
		t.Fatalf("close-stdin answered %v; want cl on %d, cr on %d", oks, local.Channel, remote.Channel)
	}
	for ch, want := range map[uint32]string{local.Channel: wantLocal.String(), remote.Channel: wantRemote.String(), viewer.Channel: wantRemote.String()} {
		if got := out[ch].String(); got != want {
			t.Fatalf("channel %d got %q, want %q", ch, got, want)
		}
	}
	if !exits[local.Channel] || !exits[remote.Channel] || !exits[viewer.Channel] {
		t.Fatalf("exits on %v", exits)
	}
	// The exits dropped the relayed channels: an unknown channel is
	// answered as one, and the upstream is closed as idle.
	c.send(t, wire.Request{Type: wire.TypeDetach, Req: "d", Channel: remote.Channel})
	if m := nextMsg(t, c, nil, isType(wire.MsgError, "d")); m.Error != wire.CodeNotAttached {
		t.Fatalf("detach of an ended relayed channel: %+v", m)
	}
	for i := 0; n1.srv.connections() > 0; i++ {
		if i == 500 {
			t.Fatalf("n1 still serves %d connections: the idle upstream was not closed", n1.srv.connections())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The next relayed request dials a new upstream: with the old one
	// closed, its answer can only have come through one. (That upstream
	// is retired as soon as the ended execution's channel ends, so the
	// count of n1's connections says nothing by now.)
	c.send(t, wire.Request{Type: wire.TypeAttach, Req: "late", ID: st.ID})
	if m := nextMsg(t, c, nil, isType(wire.MsgAttached, "late")); m.Channel != 4 {
		t.Fatalf("attach after the idle close: channel %d, want 4", m.Channel)
	}
}

// TestRelayHoldsTheProgram: an acknowledging driver on n0 of an
// execution on n1 stops reading: the program on n1 waits (the relay
// acks nothing), and when the driver reads again nothing is lost.
func TestRelayHoldsTheProgram(t *testing.T) {
	t.Parallel()
	nodes := newRelayCluster(t, 2, nil)
	n0, n1 := nodes[0], nodes[1]
	tok := n0.token(t, "acme", allScopes...)
	const n = 1_000_000
	id := n1.id("stall")
	seqStartOn(t, n1, tok, id, n)
	c := dialRelayNode(t, n0, tok)
	c.send(t, wire.Request{Type: wire.TypeAttach, Req: "a", ID: id, Ack: true})
	// Without acks the program stops with about a ring of output.
	var prev uint64
	steady := 0
	for i := 0; steady < 5; i++ {
		if i == 200 {
			t.Fatalf("the program never stopped: %d bytes out", prev)
		}
		time.Sleep(50 * time.Millisecond)
		st, _ := n1.sup.RingStats("acme", id)
		if st.OutputBytes == prev {
			steady++
		} else {
			steady, prev = 0, st.OutputBytes
		}
	}
	if st, _ := n1.sup.RingStats("acme", id); st.OutputBytes >= uint64(len(seqLines(n))) || st.EvictedBytes != 0 {
		t.Fatalf("stalled: ring %+v; want the program held, nothing evicted", st)
	}
	c.close()
	f := &muxFollower{id: id, sum: sha256.New()}
	f.follow(t, dialRelayNode(t, n0, tok), nil, 1)
	if !f.exited || f.lost != 0 || !bytes.Equal(f.sum.Sum(nil), sha(seqLines(n))) {
		t.Fatalf("after the stall: %d bytes, lost %d, want %d exactly", f.got, f.lost, len(seqLines(n)))
	}
}

// seqStartOn starts seq 1 n under id through nd.
func seqStartOn(t *testing.T, nd *relayNode, tok, id string, n int) {
	t.Helper()
	c := dialRelayNode(t, nd, tok)
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: id, Command: "/bin/sh", Args: []string{"-c", fmt.Sprintf("seq 1 %d", n)}})
	c.expect(t, wire.MsgStarted)
}

// muxFollower follows one execution on a connection that stays up: it
// attaches with ack, seen and incarnation, acks what it read, sends its
// input from the attached input_offset, and when the relay detaches the
// channel unavailable attaches again on the same connection.
type muxFollower struct {
	id          string
	after, seen uint64
	incarnation string
	got, lost   uint64
	sum         hash.Hash
	attaches    int
	detaches    int // detached unavailable
	refusals    int // attaches answered unavailable
	retryMS     int64
	exited      bool
	// onAttached, when set, runs at the first attached.
	onAttached func()
}

// follow runs until the exit, over at most limit attaches; input, when
// set, is sent after each attach from the input offset the owner has,
// and stdin closed at its end.
func (f *muxFollower) follow(t *testing.T, c *client, input []byte, limit int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for range limit {
		f.attaches++
		req := fmt.Sprintf("a%d", f.attaches)
		c.send(t, wire.Request{Type: wire.TypeAttach, Req: req, ID: f.id, After: f.after, Seen: f.seen, Incarnation: f.incarnation, Ack: true})
		if f.serve(t, ctx, c, req, input) {
			f.exited = true
			return
		}
	}
	if limit > 1 {
		t.Fatalf("no exit after %d attaches; %d bytes so far", limit, f.got)
	}
}

// serve reads one attach's channel until its exit (true) or its loss.
func (f *muxFollower) serve(t *testing.T, ctx context.Context, c *client, req string, input []byte) bool {
	t.Helper()
	var channel uint32
	for {
		fr, err := readRelay(ctx, c)
		if err != nil {
			t.Fatalf("reading: %v (%d bytes so far)", err, f.got)
		}
		if fr.msg != nil {
			m := fr.msg
			switch {
			case m.Type == wire.MsgAttached && m.Req == req:
				channel, f.incarnation = m.Channel, m.Incarnation
				if !m.Ack {
					t.Fatal("attached without ack")
				}
				if f.onAttached != nil {
					f.onAttached()
					f.onAttached = nil
				}
				f.sendInput(t, c, channel, m.InputOffset, input)
				continue
			case m.Type == wire.MsgError && m.Req == req:
				if m.Error != wire.CodeUnavailable || m.RetryMS <= 0 {
					t.Fatalf("attach refused: %+v", *m)
				}
				f.refusals++
				f.retryMS = m.RetryMS
				time.Sleep(50 * time.Millisecond)
				return false
			case channel == 0 || m.Channel != channel:
				continue // another channel's, or an old one's refusal
			case m.Type == wire.MsgDetached:
				if m.Error != wire.CodeUnavailable || m.RetryMS <= 0 {
					t.Fatalf("detached: %+v", *m)
				}
				f.detaches++
				f.retryMS = m.RetryMS
				return false
			case m.Type == wire.MsgGap:
				t.Fatalf("gap %+v after %d", *m, f.after)
			case m.Type == wire.MsgEvent || m.Type == wire.MsgExit:
				if !f.next(t, c, channel, m.Seq) {
					return false
				}
				if m.Type == wire.MsgExit {
					return true
				}
			}
			continue
		}
		if fr.out.Channel != channel {
			continue
		}
		f.sum.Write(fr.out.Data)
		f.got += uint64(len(fr.out.Data))
		f.seen += uint64(len(fr.out.Data))
		if !f.next(t, c, channel, fr.out.Seq) {
			return false
		}
	}
}

// next checks that seq follows and acks it.
func (f *muxFollower) next(t *testing.T, c *client, channel uint32, seq uint64) bool {
	t.Helper()
	if seq != f.after+1 {
		t.Fatalf("got seq %d after %d", seq, f.after)
	}
	f.after = seq
	b, _ := json.Marshal(wire.Request{Type: wire.TypeAck, Channel: channel, Seq: seq})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	return c.ws.Write(ctx, websocket.MessageText, b) == nil
}

// sendInput sends input from offset in frames of 100 bytes, then closes
// stdin at its end.
func (f *muxFollower) sendInput(t *testing.T, c *client, channel uint32, offset uint64, input []byte) {
	t.Helper()
	if input == nil {
		return
	}
	for off := offset; off < uint64(len(input)); off += 100 {
		c.sendInput(t, channel, off, string(input[off:min(off+100, uint64(len(input)))]))
	}
	end := uint64(len(input))
	c.send(t, wire.Request{Type: wire.TypeCloseStdin, Channel: channel, InputOffset: &end})
}

// TestRelayResumesAcrossUpstreamCuts: n0 reaches n1 through a proxy that
// cuts each upstream after a random byte budget, while a program on n1
// prints numbered lines and then echoes numbered input. The client stays
// on one connection to n0: after each detached unavailable it attaches
// again and resends input from the owner's offset. Every output byte
// arrives once and every input line is echoed once.
func TestRelayResumesAcrossUpstreamCuts(t *testing.T) {
	t.Parallel()
	var proxy *gatewaytest.CuttingProxy
	nodes := newRelayCluster(t, 2, func(from, to int, u string) string {
		if from == 0 && to == 1 {
			proxy = gatewaytest.NewCuttingProxy(t, strings.TrimPrefix(u, "http://"), gatewaytest.ProxyConfig{MinBudget: 32 << 10, Spread: 256 << 10, Seed: 7})
			return "http://" + proxy.Addr()
		}
		return u
	})
	n0, n1 := nodes[0], nodes[1]
	tok := n0.token(t, "acme", allScopes...)
	const lines = 100_000
	id := n1.id("cuts")
	start := dialRelayNode(t, n1, tok)
	start.send(t, wire.Request{Type: wire.TypeStart, ID: id, Command: "/bin/sh", Args: []string{"-c", fmt.Sprintf("seq 1 %d; cat", lines)}})
	start.expect(t, wire.MsgStarted)
	start.close()

	input := []byte(seqLines(3000))
	c := dialRelayNode(t, n0, tok)
	f := &muxFollower{id: id, sum: sha256.New()}
	f.follow(t, c, input, 2000)
	want := seqLines(lines) + string(input)
	if f.lost != 0 || !bytes.Equal(f.sum.Sum(nil), sha(want)) || f.got != uint64(len(want)) {
		t.Fatalf("transcript differs: %d bytes, lost %d, want %d exactly", f.got, f.lost, len(want))
	}
	if f.detaches < 2 || proxy.Cuts() < 2 {
		t.Fatalf("%d detaches, %d cuts: the test did not exercise a resume", f.detaches, proxy.Cuts())
	}
	t.Logf("%d cuts, %d detached unavailable, %d attaches refused, %d attaches", proxy.Cuts(), f.detaches, f.refusals, f.attaches)
}

// TestRelayKilledPeer: n1 goes away as its peers see it. Its relayed
// channel on n0 is detached unavailable with retry advice, the local
// channel on the same connection keeps working, and a new attach is
// unavailable, never not_found.
func TestRelayKilledPeer(t *testing.T) {
	t.Parallel()
	nodes := newRelayCluster(t, 2, nil)
	n0, n1 := nodes[0], nodes[1]
	tok := n0.token(t, "acme", allScopes...)
	c := dialRelayNode(t, n0, tok)
	c.send(t, wire.Request{Type: wire.TypeStart, Req: "l", ID: n0.id("here"), Command: "/bin/sh", Args: []string{"-c", "cat"}, Attach: true})
	local := nextMsg(t, c, nil, isType(wire.MsgAttached, "l"))
	c.send(t, wire.Request{Type: wire.TypeStart, Req: "r", ID: n1.id("there"), Command: "/bin/sh", Args: []string{"-c", "cat"}, Attach: true})
	remote := nextMsg(t, c, nil, isType(wire.MsgAttached, "r"))

	began := time.Now()
	n1.proxy.kill()
	m := nextMsg(t, c, nil, isType(wire.MsgDetached, ""))
	if m.Channel != remote.Channel || m.Error != wire.CodeUnavailable || m.RetryMS <= 0 || !strings.Contains(m.Message.Message, "n1") {
		t.Fatalf("after the kill: %+v", m)
	}
	t.Logf("detached unavailable %s after the kill", time.Since(began).Round(time.Millisecond))
	out := map[uint32]*bytes.Buffer{}
	c.sendInput(t, local.Channel, 0, "still here\n")
	c.send(t, wire.Request{Type: wire.TypeAttach, Req: "again", ID: n1.id("there")})
	if m := nextMsg(t, c, out, isType(wire.MsgError, "again")); m.Error != wire.CodeUnavailable || m.RetryMS <= 0 {
		t.Fatalf("attach to the killed node: %+v", m)
	}
	c.send(t, wire.Request{Type: wire.TypeCloseStdin, Req: "cl", Channel: local.Channel})
	nextMsg(t, c, out, isType(wire.MsgExit, ""))
	if got := out[local.Channel].String(); got != "still here\n" {
		t.Fatalf("the local channel got %q", got)
	}
}

// TestRelayFrozenPeer: n1 stops answering but keeps its connections (a
// stopped process, as its peers see it). The upstream's ping notices:
// the relayed channel is detached unavailable; a new attach is refused
// unavailable after the dial and header timeouts; so is an attach to a
// node whose address accepts and never reads. Thawed, the client resumes
// exactly.
func TestRelayFrozenPeer(t *testing.T) {
	t.Parallel()
	silent := newSilentListener(t)
	nodes := newRelayCluster(t, 3, func(from, to int, u string) string {
		if to == 2 {
			return "http://" + silent.Addr().String()
		}
		return u
	})
	n0, n1, n2 := nodes[0], nodes[1], nodes[2]
	tok := n0.token(t, "acme", allScopes...)
	const n = 200_000
	id := n1.id("frozen")
	seqStartOn(t, n1, tok, id, n)
	c := dialRelayNode(t, n0, tok)
	t.Cleanup(n1.proxy.thaw)
	var began time.Time
	f := &muxFollower{id: id, sum: sha256.New(), onAttached: func() { n1.proxy.freeze(); began = time.Now() }}
	// Read the channel (acking) until the relay detaches it.
	f.follow(t, c, nil, 1)
	if f.detaches != 1 {
		t.Fatalf("%d detaches after the freeze", f.detaches)
	}
	t.Logf("detached unavailable %s after the freeze (ping %s)", time.Since(began).Round(time.Millisecond), relayPing)
	began = time.Now()
	c.send(t, wire.Request{Type: wire.TypeAttach, Req: "b", ID: id})
	if m := nextMsg(t, c, nil, isType(wire.MsgError, "b")); m.Error != wire.CodeUnavailable {
		t.Fatalf("attach to the frozen node: %+v", m)
	}
	t.Logf("attach to the frozen node refused after %s", time.Since(began).Round(time.Millisecond))
	c.send(t, wire.Request{Type: wire.TypeAttach, Req: "s", ID: n2.id("never")})
	if m := nextMsg(t, c, nil, isType(wire.MsgError, "s")); m.Error != wire.CodeUnavailable {
		t.Fatalf("attach to a node that never answers: %+v", m)
	}
	n1.proxy.thaw()
	f.follow(t, c, nil, 50)
	if f.lost != 0 || !bytes.Equal(f.sum.Sum(nil), sha(seqLines(n))) {
		t.Fatalf("after the thaw: %d bytes, lost %d, want %d exactly", f.got, f.lost, len(seqLines(n)))
	}
}

// peerProxy forwards TCP connections to a node. kill closes it and every
// connection (a dead node); freeze stops it moving bytes while keeping
// the connections (a stopped one) until thaw.
type peerProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  []net.Conn
	open   chan struct{} // closed while bytes flow
	killed bool
}

func newPeerProxy(t testing.TB, target string) *peerProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &peerProxy{ln: ln, target: target, open: make(chan struct{})}
	close(p.open)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() { p.thaw(); p.kill(); p.wg.Wait() })
	return p
}

func (p *peerProxy) addr() string { return p.ln.Addr().String() }

func (p *peerProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.killed {
			p.mu.Unlock()
			c.Close()
			up.Close()
			return
		}
		p.conns = append(p.conns, c, up)
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies src to dst, waiting while the proxy is frozen.
func (p *peerProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		open := p.open
		p.mu.Unlock()
		<-open
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *peerProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default:
	}
}

func (p *peerProxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

func (p *peerProxy) kill() {
	p.mu.Lock()
	p.killed = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range conns {
		c.Close()
	}
}

// newSilentListener accepts connections and never reads them.
func newSilentListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln
}

// TestRelayCountsChannels: MaxChannels counts local and relayed channels
// alike, whichever comes first.
func TestRelayCountsChannels(t *testing.T) {
	t.Parallel()
	nodes := newRelayClusterWith(t, 2, nil, func(_ int, c *Config) { c.MaxChannels = 2 })
	n0, n1 := nodes[0], nodes[1]
	tok := n0.token(t, "acme", allScopes...)
	c := dialRelayNode(t, n0, tok)
	c.send(t, wire.Request{Type: wire.TypeStart, Req: "r", ID: n1.id("there"), Command: "/bin/sh", Args: []string{"-c", "cat"}, Attach: true})
	nextMsg(t, c, nil, isType(wire.MsgAttached, "r"))
	c.send(t, wire.Request{Type: wire.TypeStart, Req: "l", ID: "here", Command: "/bin/sh", Args: []string{"-c", "cat"}, Attach: true})
	here := nextMsg(t, c, nil, isType(wire.MsgAttached, "l")).ID
	if here != n0.id("here") {
		t.Fatalf("a start here of key here is %q, want %q", here, n0.id("here"))
	}
	for _, id := range []string{here, n1.id("there")} {
		c.send(t, wire.Request{Type: wire.TypeAttach, Req: "third", ID: id})
		if m := nextMsg(t, c, nil, isType(wire.MsgError, "third")); m.Error != wire.CodeTooManyChannels {
			t.Fatalf("a third channel on %s: %+v", id, m)
		}
	}
}

// TestRelayForwardsReauth: a reauth on n0 reaches the upstream, so the
// owner keeps serving the relayed channel after the first token's
// expiry; without one the owner's 4001 closes the client connection
// with the same code, though n0 itself would still accept the token.
func TestRelayForwardsReauth(t *testing.T) {
	t.Parallel()
	// n0 accepts a token for a minute past its exp, n1 for 10ms: the
	// close without a reauth is the owner's, passed on.
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("0123456789abcdef0123456789abcdef-test-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	lenient, err := auth.New(auth.Config{HS256SecretFile: secretFile, Leeway: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	nodes := newRelayClusterWith(t, 2, nil, func(i int, c *Config) {
		if i == 0 {
			c.Auth = lenient
		}
	})
	n0, n1 := nodes[0], nodes[1]
	mint := func(d time.Duration) string {
		tok, err := n0.authn.Mint(auth.Claims{Subject: "user-acme", Tenant: "acme", Scopes: map[string]bool{auth.ScopeCreate: true, auth.ScopeAttach: true, auth.ScopeWrite: true},
			IssuedAt: time.Now(), ExpiresAt: time.Now().Add(d)})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	for _, reauth := range []bool{true, false} {
		short := mint(2 * time.Second)
		c := dialRelayNode(t, n0, short)
		id := n1.id(fmt.Sprintf("reauth-%v", reauth))
		c.send(t, wire.Request{Type: wire.TypeStart, Req: "r", ID: id, Command: "/bin/sh", Args: []string{"-c", "cat"}, Attach: true})
		ch := nextMsg(t, c, nil, isType(wire.MsgAttached, "r")).Channel
		if reauth {
			c.send(t, wire.Request{Type: wire.TypeReauth, Req: "re", Token: mint(time.Hour)})
			nextMsg(t, c, nil, isType(wire.MsgOK, "re"))
		}
		time.Sleep(2500 * time.Millisecond) // past the short token's exp
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		if !reauth {
			var err error
			for err == nil {
				_, err = readRelay(ctx, c)
			}
			cancel()
			var ce websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != wire.CloseAuthExpired || !strings.Contains(ce.Reason, "owner") {
				t.Fatalf("without a reauth: closed with %v, want %d from the owner", err, wire.CloseAuthExpired)
			}
			continue
		}
		c.sendInput(t, ch, 0, "after reauth\n")
		out := map[uint32]*bytes.Buffer{}
		c.send(t, wire.Request{Type: wire.TypeCloseStdin, Req: "cl", Channel: ch})
		nextMsg(t, c, out, isType(wire.MsgExit, ""))
		cancel()
		if got := out[ch].String(); got != "after reauth\n" {
			t.Fatalf("after the reauth the relayed channel got %q", got)
		}
	}
}

// TestByteBudget: acquire waits while the bytes are taken and a release
// wakes it; a request above the whole budget takes the whole budget.
func TestByteBudget(t *testing.T) {
	t.Parallel()
	b := newByteBudget(100)
	ctx := t.Context()
	if !b.acquire(ctx, 60) || !b.acquire(ctx, 40) {
		t.Fatal("acquire within the budget")
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if b.acquire(short, 1) {
		t.Fatal("acquired past the budget")
	}
	got := make(chan bool)
	go func() { got <- b.acquire(ctx, 1000) }() // clamped to 100
	b.release(60)
	select {
	case <-got:
		t.Fatal("an oversized request took a partial budget")
	case <-time.After(20 * time.Millisecond):
	}
	b.release(40)
	if !<-got {
		t.Fatal("the oversized request never got the whole budget")
	}
	b.release(1000)
	if b.free != 100 {
		t.Fatalf("free %d after releasing everything, want 100", b.free)
	}
}

// TestRelayKeyedStart: a keyed start through n0 whose key ranks n1 first
// runs on n1 and is relayed; its retry through n0 is the same execution.
func TestRelayKeyedStart(t *testing.T) {
	t.Parallel()
	nodes := newRelayCluster(t, 2, nil)
	n0, n1 := nodes[0], nodes[1]
	key := ""
	for i := range 100 {
		if k := fmt.Sprintf("k%d", i); cluster.Rank("acme", k, []string{"n0", "n1"})[0] == "n1" {
			key = k
			break
		}
	}
	if key == "" {
		t.Fatal("no key of 100 ranks n1 first")
	}
	tok := n0.token(t, "acme", allScopes...)
	c := dialRelayNode(t, n0, tok)
	for i, req := range []string{"s1", "s2"} {
		c.send(t, wire.Request{Type: wire.TypeStart, Req: req, ID: key, Command: "/bin/sh", Args: []string{"-c", "cat"}, Attach: true})
		st := nextMsg(t, c, nil, isType(wire.MsgStarted, req))
		att := nextMsg(t, c, nil, isType(wire.MsgAttached, req))
		if st.ID != n1.id(key) || att.Channel != uint32(i+1) {
			t.Fatalf("start %d of key %s: %q on channel %d; want %q on %d", i, key, st.ID, att.Channel, n1.id(key), i+1)
		}
	}
}

// TestRelayHopAnswersItself: an owner's hop connection answers an ID of
// its own name under an earlier epoch gone, relayed back to the client,
// and an ID of another node unavailable: a hop is never relayed again.
func TestRelayHopAnswersItself(t *testing.T) {
	t.Parallel()
	nodes := newRelayCluster(t, 2, nil)
	n0, n1 := nodes[0], nodes[1]
	tok := n0.token(t, "acme", allScopes...)
	old := execid.Owner{Node: "n1", Epoch: "aaaaaa"}
	if old.Epoch == n1.owner.Epoch {
		old.Epoch = "bbbbbb"
	}
	c := dialRelayNode(t, n0, tok)
	c.send(t, wire.Request{Type: wire.TypeAttach, Req: "old", ID: execid.Canonical(old, "x")})
	if m := nextMsg(t, c, nil, isType(wire.MsgError, "old")); m.Error != wire.CodeGone {
		t.Fatalf("an ID of n1's earlier epoch through n0: %+v, want gone", m)
	}
	ws, err := n0.srv.route.dialUpstream(t.Context(), "n1", tok, "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	hop := &client{ws: ws}
	hop.send(t, wire.Request{Type: wire.TypeAttach, Req: "foreign", ID: n0.id("x")})
	if m := nextMsg(t, hop, nil, isType(wire.MsgError, "foreign")); m.Error != wire.CodeUnavailable || m.RetryMS <= 0 {
		t.Fatalf("an ID of n0 on a hop to n1: %+v, want unavailable", m)
	}
}
