package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/cluster"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session/sessiontest"
)

// TestClusterHello: each node of a cluster names itself in its hello and
// lists the nodes feature; a single node does neither.
func TestClusterHello(t *testing.T) {
	t.Parallel()
	envs := newFakeCluster(t, 2, nil)
	for i, e := range envs {
		c := e.dial(t, e.token(t, "acme", auth.ScopeAttach))
		h, _ := c.expect(t, wire.MsgHello)
		c.close()
		if h.Node != clusterNodeName(i) || !slices.Contains(h.Features, wire.FeatureNodes) {
			t.Errorf("node %d: hello node %q features %v", i, h.Node, h.Features)
		}
	}
	single := newFakeEnv(t, &sessiontest.Launcher{}, nil)
	c := single.dial(t, single.token(t, "acme", auth.ScopeAttach))
	defer c.close()
	if h, _ := c.expect(t, wire.MsgHello); h.Node != "" || slices.Contains(h.Features, wire.FeatureNodes) {
		t.Errorf("single node: hello node %q features %v", h.Node, h.Features)
	}
}

// nodeAPI is node e's HTTP API, its full handler.
func nodeAPI(e *testEnv) *apiEnv { return &apiEnv{testEnv: e, api: e.http} }

// startOn starts an execution through e's API and returns it.
func startOn(t *testing.T, e *testEnv, tok string, body apiStart) apiExecution {
	t.Helper()
	var x apiExecution
	nodeAPI(e).must(t, http.StatusCreated, "POST", "/v1/executions", tok, body, &x)
	return x
}

// TestClusterProxiesByID: get, events, input and cancel of an execution
// owned by n1, asked of n0, are served by n1 through n0: the answers are
// n1's, the input reaches n1's program, the cancel ends it.
func TestClusterProxiesByID(t *testing.T) {
	t.Parallel()
	envs := newFakeCluster(t, 2, nil)
	tok := envs[0].token(t, "acme", allScopes...)
	x := startOn(t, envs[1], tok, apiStart{Command: "/bin/sh"})
	if x.Node != "n1" || !strings.HasPrefix(x.ID, "n1.") {
		t.Fatalf("started on n1 as %q, node %q", x.ID, x.Node)
	}
	front := nodeAPI(envs[0])
	path := "/v1/executions/" + x.ID
	var got apiExecution
	front.must(t, http.StatusOK, "GET", path, tok, nil, &got)
	if got.ID != x.ID || got.Node != "n1" || got.Incarnation != x.Incarnation {
		t.Fatalf("GET through n0: %+v, want n1's %+v", got, x)
	}
	// A poll answers as soon as any event is there: the start may come
	// back before the output, so poll on from where the last answer ended.
	out, after, incarnation := "", uint64(0), ""
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out, "on n1"); {
		if time.Now().After(deadline) {
			t.Fatalf("events through n0: %q, want n1's output", out)
		}
		var page apiEvents
		front.must(t, http.StatusOK, "GET", fmt.Sprintf("%s/events?after=%d&incarnation=%s&wait=2s", path, after, incarnation), tok, nil, &page)
		out += string(decodeData(t, page.Events))
		after, incarnation = page.NextAfter, page.Incarnation
	}
	var in struct {
		InputOffset uint64 `json:"input_offset"`
	}
	front.must(t, http.StatusOK, "POST", path+"/input", tok, apiInput{Offset: 0, Data: []byte("hi\n")}, &in)
	if in.InputOffset != 3 {
		t.Fatalf("input through n0: offset %d, want 3", in.InputOffset)
	}
	waitUntil(t, "n1's program gets the input", func() bool {
		got, _ := envs[1].fake.Procs()[0].Input()
		return got == "hi\n"
	})
	front.must(t, http.StatusAccepted, "POST", path+"/cancel", tok, nil, &got)
	if got.Node != "n1" {
		t.Fatalf("cancel answered by %q", got.Node)
	}
	// n0 under another epoch: made before n0 lost its state.
	front.fails(t, http.StatusGone, wire.CodeGone, "GET", "/v1/executions/n0."+strings.SplitN(x.ID, ".", 2)[1], tok, nil)
}

// countingPeer is a peer that counts the requests it gets and answers
// each 500.
type countingPeer struct {
	*httptest.Server
	n atomic.Int64
}

func newCountingPeer(t *testing.T) *countingPeer {
	p := &countingPeer{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.n.Add(1)
		http.Error(w, "counted", http.StatusInternalServerError)
	}))
	t.Cleanup(p.Close)
	return p
}

// withPeer adds peer at url to the members of the node c configures, for
// a tweak of newFakeCluster.
func withPeer(t *testing.T, c *Config, peer, url string) {
	t.Helper()
	old := c.Cluster.Members
	peers := map[string]string{peer: url}
	for _, m := range old.Members() {
		if u, _ := old.URL(m); m != peer {
			peers[m] = u.String()
		}
	}
	m, err := cluster.NewStatic(old.Self(), peers)
	if err != nil {
		t.Fatal(err)
	}
	c.Cluster.Members = m
}

// hopRequest is a request to e signed by node from with secret, as a hop
// asking op.
func hopRequest(t *testing.T, e *testEnv, secret []byte, from, to, op, method, path, token string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, e.http.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	s, err := cluster.NewSigner(from, secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SignRequest(req, to, op, "203.0.113.9:5123"); err != nil {
		t.Fatal(err)
	}
	return req
}

func doRequest(t *testing.T, req *http.Request) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// TestClusterHopIsNeverForwarded: a hop request for an execution another
// node owns is answered unavailable by the node it reached and never
// forwarded again (the peer it names counts no request), while the same
// request without a hop is forwarded there: at most one hop, no loops.
func TestClusterHopIsNeverForwarded(t *testing.T) {
	t.Parallel()
	peer := newCountingPeer(t)
	e := newFakeCluster(t, 1, func(i int, c *Config) { withPeer(t, c, "n1", peer.URL) })[0]
	tok := e.token(t, "acme", allScopes...)
	path := "/v1/executions/n1.aaaaaa~job"
	status, h, b := doRequest(t, hopRequest(t, e, clusterHopSecret, "n2", "n0", cluster.OpLocal, "GET", path, tok))
	if status != http.StatusServiceUnavailable || !strings.Contains(string(b), wire.CodeUnavailable) || h.Get("Retry-After") == "" {
		t.Fatalf("hop for n1's execution: %d %q Retry-After %q, want 503 unavailable", status, b, h.Get("Retry-After"))
	}
	if n := peer.n.Load(); n != 0 {
		t.Fatalf("the hop was forwarded: n1 got %d requests", n)
	}
	// A hop for this node's ID under an earlier epoch: gone, not not_found.
	stale := "/v1/executions/n0.aaaaaa~job"
	if e.srv.route.cfg.Owner.Epoch == "aaaaaa" {
		stale = "/v1/executions/n0.bbbbbb~job"
	}
	if status, _, b := doRequest(t, hopRequest(t, e, clusterHopSecret, "n2", "n0", cluster.OpLocal, "GET", stale, tok)); status != http.StatusGone {
		t.Fatalf("hop for an earlier epoch's ID: %d %s, want 410", status, b)
	}
	status, _, _ = nodeAPI(e).call(t, "GET", path, tok, nil)
	if n := peer.n.Load(); n != 1 || status != http.StatusInternalServerError {
		t.Fatalf("without a hop: n1 got %d requests, status %d; want 1, n1's 500", n, status)
	}
}

// waitUntil polls cond every 10ms for up to 10s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 1000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("waited 10s: %s", what)
}

// TestClusterForgedHop: a hop signed with another secret, addressed to
// another node or outside the window is refused 401 on the HTTP API and
// on /v1/connect, never served as a hop.
func TestClusterForgedHop(t *testing.T) {
	t.Parallel()
	e := newFakeCluster(t, 2, nil)[0]
	tok := e.token(t, "acme", allScopes...)
	other := []byte("another-hop-secret-another-hop-secret-0123")
	cases := []struct {
		name, to string
		secret   []byte
	}{
		{"other secret", "n0", other},
		{"to another node", "n1", clusterHopSecret},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, h, b := doRequest(t, hopRequest(t, e, c.secret, "n1", c.to, cluster.OpLocal, "GET", "/v1/executions", tok))
			if code != http.StatusUnauthorized || !strings.Contains(string(b), wire.CodeUnauthorized) || h.Get("WWW-Authenticate") == "" {
				t.Fatalf("HTTP: %d %q, want 401", code, b)
			}
			req := hopRequest(t, e, c.secret, "n1", c.to, cluster.OpLocal, "GET", "/v1/connect", tok)
			opts := &websocket.DialOptions{Subprotocols: []string{wire.Subprotocol}, HTTPHeader: req.Header}
			ws, resp, err := websocket.Dial(t.Context(), e.url(), opts)
			if err == nil {
				ws.CloseNow()
				t.Fatal("WebSocket: upgraded with a forged hop")
			}
			if status(resp) != http.StatusUnauthorized {
				t.Fatalf("WebSocket: status %d, want 401", status(resp))
			}
		})
	}
	// The same request with a valid hop is served.
	code, _, b := doRequest(t, hopRequest(t, e, clusterHopSecret, "n1", "n0", cluster.OpList, "GET", "/v1/executions", tok))
	if code != http.StatusOK {
		t.Fatalf("a valid hop: %d %s", code, b)
	}
}

// silentPeer accepts connections and never answers, as a frozen node.
func silentPeer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
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
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// TestClusterListPartial: the list through any node holds every node's
// executions, oldest first; a peer that accepts and never answers makes
// it partial, naming that node, once the peer timeout passed.
func TestClusterListPartial(t *testing.T) {
	t.Parallel()
	frozen := silentPeer(t)
	envs := newFakeCluster(t, 2, func(i int, c *Config) {
		if i == 0 {
			withPeer(t, c, "n9", frozen)
		}
	})
	tok := envs[0].token(t, "acme", allScopes...)
	a := startOn(t, envs[0], tok, apiStart{Command: "/bin/sh"})
	b := startOn(t, envs[1], tok, apiStart{Command: "/bin/sh"})
	startOn(t, envs[1], envs[1].token(t, "globex", allScopes...), apiStart{Command: "/bin/sh"})
	var list apiList
	t0 := time.Now()
	nodeAPI(envs[0]).must(t, http.StatusOK, "GET", "/v1/executions", tok, nil, &list)
	t.Logf("partial list in %v (peer timeout %v)", time.Since(t0), clusterTimeout)
	var ids []string
	for _, x := range list.Executions {
		ids = append(ids, x.ID+"@"+x.Node)
	}
	want := []string{a.ID + "@n0", b.ID + "@n1"}
	if !slices.Equal(ids, want) || !list.Partial || !slices.Equal(list.Unreachable, []string{"n9"}) {
		t.Fatalf("list %v partial %v unreachable %v; want %v, partial, [n9]", ids, list.Partial, list.Unreachable, want)
	}
	// n1 has no silent peer: its list is whole, and not partial.
	list = apiList{}
	nodeAPI(envs[1]).must(t, http.StatusOK, "GET", "/v1/executions", tok, nil, &list)
	if len(list.Executions) != 2 || list.Partial || list.Unreachable != nil {
		t.Fatalf("n1's list: %d executions, partial %v %v", len(list.Executions), list.Partial, list.Unreachable)
	}
}

// switchRT is a transport to peers that fails every request to a blocked
// host at once, as a refused dial does, and counts the requests it let
// through by host.
type switchRT struct {
	rt      http.RoundTripper
	mu      sync.Mutex
	blocked map[string]bool
	sent    map[string]int
}

func newSwitchRT() *switchRT {
	return &switchRT{rt: cluster.NewTransport(clusterDialTimeout), blocked: map[string]bool{}, sent: map[string]int{}}
}

func (s *switchRT) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	blocked := s.blocked[req.URL.Host]
	if !blocked {
		s.sent[req.URL.Host]++
	}
	s.mu.Unlock()
	if blocked {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused (blocked by the test)")}
	}
	return s.rt.RoundTrip(req)
}

// block blocks or unblocks node's host as e's router sees it, and
// forgets e's memory of its failures.
func (s *switchRT) block(t *testing.T, e *testEnv, node string, on bool) {
	t.Helper()
	u, ok := e.srv.route.cfg.Members.URL(node)
	if !ok {
		t.Fatalf("no member %s", node)
	}
	s.mu.Lock()
	s.blocked[u.Host] = on
	s.mu.Unlock()
	e.srv.route.health.OK(node)
}

func (s *switchRT) count(t *testing.T, e *testEnv, node string) int {
	t.Helper()
	u, _ := e.srv.route.cfg.Members.URL(node)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent[u.Host]
}

// keyRanked returns a key whose top two candidates for tenant among
// members are h and a, in that order.
func keyRanked(t *testing.T, tenant, prefix, h, a string, members []string) string {
	t.Helper()
	for i := range 10000 {
		key := fmt.Sprintf("%s-%d", prefix, i)
		if r := cluster.Rank(tenant, key, members); r[0] == h && r[1] == a {
			return key
		}
	}
	t.Fatalf("no key ranks %s, %s first", h, a)
	return ""
}

// TestClusterKeyedStart: plan section 5's cases through n0, for keys
// whose candidates are H=n1 and A=n2 (never the front itself, so every
// probe crosses the network).
func TestClusterKeyedStart(t *testing.T) {
	t.Parallel()
	sw := newSwitchRT()
	envs := newFakeCluster(t, 3, func(i int, c *Config) {
		if i == 0 {
			c.Cluster.Transport = sw
		}
	})
	front := nodeAPI(envs[0])
	tok := envs[0].token(t, "acme", allScopes...)
	members := []string{"n0", "n1", "n2"}
	epoch := func(i int) string { return envs[i].srv.route.cfg.Owner.Epoch }
	sh := func(id string) apiStart { return apiStart{ID: id, Command: "/bin/sh"} }

	t.Run("1 no id: here, canonical", func(t *testing.T) {
		x := startOn(t, envs[0], tok, sh(""))
		if x.Node != "n0" || !strings.HasPrefix(x.ID, "n0."+epoch(0)+"~") {
			t.Fatalf("started %q on %q", x.ID, x.Node)
		}
	})
	t.Run("2 canonical id: the node it names", func(t *testing.T) {
		x := startOn(t, envs[2], tok, sh(""))
		var again apiExecution
		front.must(t, http.StatusOK, "POST", "/v1/executions", tok, sh(x.ID), &again)
		if again.ID != x.ID || again.Node != "n2" || again.Incarnation != x.Incarnation {
			t.Fatalf("retry through n0: %+v, want %+v", again, x)
		}
	})
	t.Run("3 both say no: H; a retry anywhere finds it", func(t *testing.T) {
		key := keyRanked(t, "acme", "both", "n1", "n2", members)
		x := startOn(t, envs[0], tok, sh(key))
		if want := "n1." + epoch(1) + "~" + key; x.ID != want || x.Node != "n1" {
			t.Fatalf("started %q on %q, want %q on n1", x.ID, x.Node, want)
		}
		for i := range 3 {
			var again apiExecution
			nodeAPI(envs[i]).must(t, http.StatusOK, "POST", "/v1/executions", tok, sh(key), &again)
			if again.ID != x.ID || again.Incarnation != x.Incarnation {
				t.Fatalf("retry through n%d: %q, want %q", i, again.ID, x.ID)
			}
		}
		// 4: the key held with another spec is a conflict, wherever asked.
		front.fails(t, http.StatusConflict, wire.CodeConflict, "POST", "/v1/executions", tok, apiStart{ID: key, Command: "/bin/bash"})
	})
	t.Run("5 H silent, A says no: A; found there once H is back", func(t *testing.T) {
		key := keyRanked(t, "acme", "hsilent", "n1", "n2", members)
		sw.block(t, envs[0], "n1", true)
		x := startOn(t, envs[0], tok, sh(key))
		sw.block(t, envs[0], "n1", false)
		if want := "n2." + epoch(2) + "~" + key; x.ID != want {
			t.Fatalf("started %q, want %q on A", x.ID, want)
		}
		var again apiExecution
		front.must(t, http.StatusOK, "POST", "/v1/executions", tok, sh(key), &again)
		if again.ID != x.ID {
			t.Fatalf("retry with H back: %q, want A's %q", again.ID, x.ID)
		}
	})
	t.Run("5 H says no, A silent: H", func(t *testing.T) {
		key := keyRanked(t, "acme", "asilent", "n1", "n2", members)
		sw.block(t, envs[0], "n2", true)
		defer sw.block(t, envs[0], "n2", false)
		if x := startOn(t, envs[0], tok, sh(key)); x.Node != "n1" {
			t.Fatalf("started on %q, want H n1", x.Node)
		}
	})
	t.Run("a holder marked down is still asked", func(t *testing.T) {
		// Right after a node returns, the front may still count it down
		// from a failure a moment ago; skipping the probe would make a
		// second execution for a key its holder answers for.
		key := keyRanked(t, "acme", "markeddown", "n1", "n2", members)
		x := startOn(t, envs[0], tok, sh(key))
		envs[0].srv.route.health.Fail("n1")
		var again apiExecution
		front.must(t, http.StatusOK, "POST", "/v1/executions", tok, sh(key), &again)
		if again.ID != x.ID {
			t.Fatalf("retry with H marked down: %q, want %q", again.ID, x.ID)
		}
	})
	t.Run("5 both silent: unavailable", func(t *testing.T) {
		key := keyRanked(t, "acme", "nsilent", "n1", "n2", members)
		sw.block(t, envs[0], "n1", true)
		sw.block(t, envs[0], "n2", true)
		defer sw.block(t, envs[0], "n1", false)
		defer sw.block(t, envs[0], "n2", false)
		status, h, b := front.call(t, "POST", "/v1/executions", tok, sh(key))
		if status != http.StatusServiceUnavailable || !strings.Contains(string(b), `"unavailable"`) || h.Get("Retry-After") == "" {
			t.Fatalf("%d %s Retry-After %q, want 503 unavailable", status, b, h.Get("Retry-After"))
		}
		for i := range 3 {
			for _, x := range envs[i].sup.List("acme") {
				if strings.HasSuffix(x.ID, "~"+key) || x.ID == key {
					t.Fatalf("n%d made %s while its candidates were silent", i, x.ID)
				}
			}
		}
	})
}

// TestClusterKilledPeer: requests for a killed node's executions are
// unavailable with retry advice, never not_found; after one failed dial
// the node counts as down and the next request is answered without
// dialling it.
func TestClusterKilledPeer(t *testing.T) {
	t.Parallel()
	sw := newSwitchRT()
	envs := newFakeCluster(t, 2, func(i int, c *Config) {
		if i == 0 {
			c.Cluster.Transport = sw
		}
	})
	tok := envs[0].token(t, "acme", allScopes...)
	x := startOn(t, envs[1], tok, apiStart{Command: "/bin/sh"})
	envs[1].http.CloseClientConnections()
	envs[1].http.Listener.Close() // killed: connections refused from now on
	front := nodeAPI(envs[0])
	before := sw.count(t, envs[0], "n1")
	for i := range 3 {
		got := front.fails(t, http.StatusServiceUnavailable, wire.CodeUnavailable, "GET", "/v1/executions/"+x.ID, tok, nil)
		if !strings.Contains(got.Message, "n1") {
			t.Fatalf("request %d: message %q does not name n1", i, got.Message)
		}
	}
	if n := sw.count(t, envs[0], "n1") - before; n != 1 {
		t.Fatalf("%d requests dialled the killed node, want 1: the rest are answered from its health", n)
	}
}

// dialNode connects to e's /v1/connect with query (such as "?node=n1")
// and returns the node its hello names.
func dialNode(t *testing.T, e *testEnv, tok, query string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, e.url()+query, &websocket.DialOptions{
		Subprotocols: []string{wire.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}},
	})
	if err != nil {
		t.Fatalf("dial %s: %v (status %d)", query, err, status(resp))
	}
	c := &client{ws: ws}
	defer c.close()
	h, _ := c.expect(t, wire.MsgHello)
	return h.Node
}

// TestClusterConnectHint: ?node= naming another member proxies the whole
// connection there; a bad, unknown or own name, and a node that cannot
// be reached, are served here: the hint never adds a failure.
func TestClusterConnectHint(t *testing.T) {
	t.Parallel()
	envs := newFakeCluster(t, 3, nil)
	tok := envs[0].token(t, "acme", allScopes...)
	cases := []struct{ query, want string }{
		{"?node=n1", "n1"},
		{"?node=n2", "n2"},
		{"?node=n0", "n0"},
		{"?node=nobody", "n0"},
		{"?node=Not_A_Name", "n0"},
		{"", "n0"},
	}
	for _, c := range cases {
		if got := dialNode(t, envs[0], tok, c.query); got != c.want {
			t.Errorf("%q: served by %q, want %q", c.query, got, c.want)
		}
	}
	envs[2].http.CloseClientConnections()
	envs[2].http.Listener.Close()
	if got := dialNode(t, envs[0], tok, "?node=n2"); got != "n0" {
		t.Errorf("?node= naming a killed node: served by %q, want n0", got)
	}
}

// TestClusterDialUpstream: dialUpstream reaches the node as a hop (its
// hello read), the connection outlives the dial's context, and a killed
// node is unavailable with retry advice.
func TestClusterDialUpstream(t *testing.T) {
	t.Parallel()
	envs := newFakeCluster(t, 3, nil)
	tok := envs[0].token(t, "acme", allScopes...)
	r := envs[0].srv.route
	ctx, cancel := context.WithCancel(t.Context())
	ws, err := r.dialUpstream(ctx, "n1", tok, "203.0.113.9:5123")
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	up := &client{ws: ws}
	defer up.close()
	up.send(t, wire.Request{Type: wire.TypePing, Req: "p1"})
	if m, _ := up.expect(t, wire.MsgPong); m.Req != "p1" {
		t.Fatalf("pong %+v", m)
	}
	var hop int
	envs[1].srv.mu.Lock()
	for c := range envs[1].srv.conns {
		if c.hop && c.remote == "203.0.113.9:5123" {
			hop++
		}
	}
	envs[1].srv.mu.Unlock()
	if hop != 1 {
		t.Fatalf("n1 holds %d hop connections from 203.0.113.9:5123, want 1", hop)
	}
	envs[2].http.CloseClientConnections()
	envs[2].http.Listener.Close()
	_, err = r.dialUpstream(t.Context(), "n2", tok, "")
	var u *errUnavailable
	if !errors.As(err, &u) || u.RetryMS() <= 0 {
		t.Fatalf("dial a killed node: %v, want unavailable with retry advice", err)
	}
}

// TestClusterLocateBareID: an execution made under a bare ID (before
// cluster mode) is found by asking every node; an unknown one is
// not_found only when every node said so, and unavailable while one is
// silent.
func TestClusterLocateBareID(t *testing.T) {
	t.Parallel()
	sw := newSwitchRT()
	envs := newFakeCluster(t, 3, func(i int, c *Config) {
		if i == 0 {
			c.Cluster.Transport = sw
		}
	})
	tok := envs[0].token(t, "acme", allScopes...)
	sp, err := envs[2].srv.spec("acme", wire.Request{Command: "/bin/sh"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envs[2].sup.Start(t.Context(), "acme", "legacy-1", sp); err != nil {
		t.Fatal(err)
	}
	front := nodeAPI(envs[0])
	var x apiExecution
	front.must(t, http.StatusOK, "GET", "/v1/executions/legacy-1", tok, nil, &x)
	if x.ID != "legacy-1" || x.Node != "n2" {
		t.Fatalf("located %+v, want legacy-1 on n2", x)
	}
	front.fails(t, http.StatusNotFound, wire.CodeNotFound, "GET", "/v1/executions/legacy-2", tok, nil)
	front.fails(t, http.StatusNotFound, wire.CodeNotFound, "GET", "/v1/executions/legacy-1", envs[0].token(t, "globex", allScopes...), nil)
	sw.block(t, envs[0], "n1", true)
	defer sw.block(t, envs[0], "n1", false)
	front.fails(t, http.StatusServiceUnavailable, wire.CodeUnavailable, "GET", "/v1/executions/legacy-2", tok, nil)
}

// TestClusterLongPollOutlivesPeerTimeout: a proxied events long poll may
// wait longer than the peer timeout: its header timeout grows by its
// wait, so it ends with the owner's answer, not unavailable.
func TestClusterLongPollOutlivesPeerTimeout(t *testing.T) {
	t.Parallel()
	envs := newFakeCluster(t, 2, nil)
	tok := envs[0].token(t, "acme", allScopes...)
	x := startOn(t, envs[1], tok, apiStart{Command: "/bin/sh"})
	front := nodeAPI(envs[0])
	path := "/v1/executions/" + x.ID + "/events"
	var page apiEvents
	front.must(t, http.StatusOK, "GET", path+"?after=0&wait=10s", tok, nil, &page)
	wait := 2 * clusterTimeout
	t0 := time.Now()
	front.must(t, http.StatusOK, "GET", fmt.Sprintf("%s?after=%d&incarnation=%s&wait=%s", path, page.NextAfter, page.Incarnation, wait), tok, nil, &page)
	t.Logf("a %v poll through n0 answered after %v (peer timeout %v)", wait, time.Since(t0), clusterTimeout)
}
