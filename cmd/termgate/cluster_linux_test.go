package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/cluster"
	"github.com/termgate/termgate/gateway/gatewaytest"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// The end-to-end tests of many nodes: three termgate serve processes on
// 127.0.0.1, 127.0.0.2 and 127.0.0.3 with static peers and a shared node
// secret, and a real HAProxy in front, run with termgate manifest
// haproxy's configuration. Each test runs serve in child processes of the
// test binary (serveFromEnv), so a node can be killed -9, stopped and
// restarted on its state directory.

// testCluster is the nodes of one test and the load balancer in front.
type testCluster struct {
	t     *testing.T
	nodes []*durableNode
	names []string // n0, n1, ...: the --node of each
	lb    string   // HAProxy's base URL
	tok   string   // tenant acme, every scope
}

// needClusterServe fails when serve has no cluster mode.
func needClusterServe(t *testing.T) {
	t.Helper()
	if serveFlagSet().Lookup("node") == nil || serveFlagSet().Lookup("peer") == nil {
		t.Fatal("serve has no --node and --peer")
	}
}

// newCluster starts n nodes and HAProxy in front of them; extra are serve
// flags for every node.
func newCluster(t *testing.T, n int, extra ...string) *testCluster {
	t.Helper()
	needClusterServe(t)
	needHaproxy(t)
	nodeSecret := filepath.Join(t.TempDir(), "node-secret")
	if err := os.WriteFile(nodeSecret, []byte("the-node-secret-of-this-test-cluster-0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t}
	for i := range n {
		c.nodes = append(c.nodes, newDurableNodeOn(t, fmt.Sprintf("127.0.0.%d", i+1), extra...))
		c.names = append(c.names, fmt.Sprintf("n%d", i))
	}
	servers := []string{}
	for i, node := range c.nodes {
		node.args = append(node.args, "--node", c.names[i], "--node-secret-file", nodeSecret,
			"--peer-ping", "250ms", "--peer-timeout", "1s", "--peer-dial-timeout", "1s",
			"--trusted-proxy", "127.0.0.1", "--max-conns-per-addr", "4096")
		for j, peer := range c.nodes {
			node.args = append(node.args, "--peer", c.names[j]+"=http://"+peer.addr)
		}
		servers = append(servers, "--server", c.names[i]+"="+node.addr)
	}
	for _, node := range c.nodes {
		node.start()
	}
	lb := freeAddr(t)
	startHAProxy(t, manifestHaproxy(t, append(servers, "--bind", lb, "--check-interval", "200ms", "--peer-timeout", "1s")...), lb)
	c.lb = "http://" + lb
	c.tok = gatewayUnderTest{secretFile: c.nodes[0].secretFile}.token(t, "acme", allScopes)
	return c
}

// url is node i's base URL.
func (c *testCluster) url(i int) string { return "http://" + c.nodes[i].addr }

// dial is a client of url whose log also goes to log (nil: the test's
// only), pinging every ping (0: the default).
func (c *testCluster) dial(t *testing.T, url string, log io.Writer, ping time.Duration) *client.Client {
	t.Helper()
	if log == nil {
		log = io.Discard
	}
	cl, err := client.Dial(t.Context(), client.Config{
		URL: url, MinBackoff: 20 * time.Millisecond, MaxBackoff: 300 * time.Millisecond, PingInterval: ping,
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(tWriter{t}, log), &slog.HandlerOptions{Level: slog.LevelDebug})),
		Token:  func(context.Context) (string, error) { return c.tok, nil },
	})
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// needRouting fails when a node does not say its name: the gateway is
// not in cluster mode.
func needRouting(t *testing.T, cl *client.Client) {
	t.Helper()
	if h := cl.Server(); h.Node == "" || !h.Has(wire.FeatureNodes) {
		t.Fatalf("the node's hello names no node: %+v", h)
	}
}

// mustAttach attaches to id through cl, whichever node owns it.
func mustAttach(t *testing.T, ctx context.Context, cl *client.Client, id string, readOnly bool) *client.Execution {
	t.Helper()
	e, err := cl.Attach(ctx, id, 0, readOnly)
	if err != nil {
		t.Fatalf("attach %s: %v", id, err)
	}
	return e
}

// needCanonical fails when a start made a bare ID: in cluster mode
// every start is placed and named by its owner.
func needCanonical(t *testing.T, id string) {
	t.Helper()
	if ownerOf(id) == "" {
		t.Fatalf("a start made the bare ID %q, not a canonical one", id)
	}
}

// ownerOf is the node a canonical ID names ("" for a bare one).
func ownerOf(id string) string {
	if !strings.Contains(id, "~") {
		return ""
	}
	node, _, _ := strings.Cut(id, ".")
	return node
}

// apiGet is GET base+path with the cluster's token: the status and the
// decoded body.
func (c *testCluster) apiGet(t *testing.T, base, path string) (int, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, map[string]any{"transport": err.Error()}
	}
	defer resp.Body.Close()
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// apiStart starts r through base's HTTP API and returns the answer's
// status and the execution's ID; a start that fails fails the test.
func (c *testCluster) apiStart(t *testing.T, base string, r wire.Request) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"id": r.ID, "command": r.Command, "args": r.Args})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/executions", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("start through %s: %v", base, err)
	}
	defer resp.Body.Close()
	var e struct {
		ID, Node, Error, Message string
	}
	json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		t.Fatalf("start %q through %s: %d %s %s", r.ID, base, resp.StatusCode, e.Error, e.Message)
	}
	if ownerOf(e.ID) == "" || e.Node != ownerOf(e.ID) {
		t.Fatalf("start %q through %s: ID %q on node %q, want a canonical ID naming its node", r.ID, base, e.ID, e.Node)
	}
	return resp.StatusCode, e.ID
}

// errCode is the server's code of err ("" for none).
func errCode(err error) string {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce.Code
	}
	return ""
}

// shortJob prints two lines and exits 5.
var shortJob = wire.Request{Command: "/bin/sh", Args: []string{"-c", "echo out-1; echo out-2; exit 5"}}

// TestClusterStartAttachEverywhere: keyed and unkeyed starts through the
// load balancer; the execution attached through each node and the load
// balancer gives the same bytes and exit; hello names who served.
func TestClusterStartAttachEverywhere(t *testing.T) {
	serveFromEnv()
	c := newCluster(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for i := range c.nodes {
		cl := c.dial(t, c.url(i), nil, 0)
		needRouting(t, cl)
		if got := cl.Server().Node; got != c.names[i] {
			t.Fatalf("node %d's hello names %q, want %s", i, got, c.names[i])
		}
	}
	keyed := shortJob
	keyed.ID = "start-everywhere"
	var ids []string
	for _, r := range []wire.Request{shortJob, keyed} {
		_, id := c.apiStart(t, c.lb, r)
		if r.ID != "" && !strings.HasSuffix(id, "~"+r.ID) {
			t.Fatalf("started %q for the key %q", id, r.ID)
		}
		if r.ID != "" {
			if status, again := c.apiStart(t, c.url(2), r); status != http.StatusOK || again != id {
				t.Fatalf("the key %q retried through n2: %d %s, want 200 %s", r.ID, status, again, id)
			}
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		owner := slices.Index(c.names, ownerOf(id))
		urls := []string{c.url(owner), c.lb + "?node=" + c.names[owner], c.url((owner + 1) % 3), c.url((owner + 2) % 3), c.lb}
		for _, url := range urls {
			cl := c.dial(t, url, nil, 0)
			f := follow(ctx, mustAttach(t, ctx, cl, id, true))
			f.ended(t, ctx)
			if f.err != nil || f.exit == nil || f.exit.Code != 5 || f.output() != "out-1\nout-2\n" {
				t.Errorf("attach %s through %s: exit %+v, err %v, output %q", id, url, f.exit, f.err, f.output())
			}
			if i := slices.Index([]string{c.url(0), c.url(1), c.url(2)}, url); i >= 0 && cl.Server().Node != c.names[i] {
				t.Errorf("served by %q through %s", cl.Server().Node, url)
			}
		}
	}
	// A start over the WebSocket through the load balancer.
	viaLB := c.dial(t, c.lb, nil, 0)
	f := start(t, ctx, viaLB, shortJob)
	f.ended(t, ctx)
	needCanonical(t, f.e.ID())
	if f.err != nil || f.exit == nil || f.exit.Code != 5 || f.output() != "out-1\nout-2\n" || !slices.Contains(c.names, ownerOf(f.e.ID())) {
		t.Fatalf("start through the LB: %s, exit %+v, err %v, output %q", f.e.ID(), f.exit, f.err, f.output())
	}
}

// TestClusterResumeAcrossNodes: a client whose every connection lands on
// a random node and is cut after a random number of bytes follows a
// paced output and an echo of numbered input: every output byte arrives
// once, every input line is echoed once.
func TestClusterResumeAcrossNodes(t *testing.T) {
	serveFromEnv()
	c := newCluster(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	needRouting(t, c.dial(t, c.url(0), nil, 0))
	proxy := gatewaytest.NewRotatingProxy(t, []string{c.nodes[0].addr, c.nodes[1].addr, c.nodes[2].addr},
		gatewaytest.ProxyConfig{MinBudget: 4 << 10, Spread: 16 << 10, MaxCuts: 80, Seed: 16})
	cl := c.dial(t, "http://"+proxy.Addr(), nil, 0)
	const rounds = 40
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do seq $((i*1000+1)) $((i*1000+1000)); i=$((i+1)); sleep 0.05; done; exit 3`, rounds)
	_, outID := c.apiStart(t, c.lb, wire.Request{ID: "resume-out", Command: "/bin/sh", Args: []string{"-c", script}})
	_, inID := c.apiStart(t, c.lb, wire.Request{ID: "resume-in", Command: "/bin/sh", Args: []string{"-c", echoScript}})
	out := follow(ctx, mustAttach(t, ctx, cl, outID, false))
	in := follow(ctx, mustAttach(t, ctx, cl, inID, false))
	until(t, "the echo is ready", func() bool { return strings.HasPrefix(in.output(), "ready\n") })
	want := "ready\n"
	for k := range 100 {
		line := fmt.Sprintf("in-%03d", k)
		if _, err := in.e.WriteContext(ctx, []byte(line+"\n")); err != nil {
			t.Fatal(err)
		}
		want += "got:" + line + "\n"
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := in.e.WriteContext(ctx, []byte("quit\n")); err != nil {
		t.Fatal(err)
	}
	want += "got:quit\n"
	out.ended(t, ctx)
	in.ended(t, ctx)
	if got := out.output(); out.err != nil || out.exit == nil || out.exit.Code != 3 || got != seqLines(rounds*1000, false) {
		t.Errorf("output: exit %+v, err %v, %d bytes (want %d), first difference at %d", out.exit, out.err, len(got), len(seqLines(rounds*1000, false)), firstDiff(got, seqLines(rounds*1000, false)))
	}
	if got := in.output(); in.err != nil || in.exit == nil || in.exit.Code != 7 || got != want {
		t.Errorf("echo: exit %+v, err %v, output %q, want %q", in.exit, in.err, got, want)
	}
	served := proxy.Served()
	t.Logf("%d cuts; connections by node %v", proxy.Cuts(), served)
	if proxy.Cuts() < 3 || len(served) < 2 {
		t.Errorf("%d cuts over %v: the client did not move between nodes", proxy.Cuts(), served)
	}
}

// listIDs is the IDs of a list answer.
func listIDs(body map[string]any) []string {
	var ids []string
	list, _ := body["executions"].([]any)
	for _, e := range list {
		if m, ok := e.(map[string]any); ok {
			id, _ := m["id"].(string)
			ids = append(ids, id)
		}
	}
	return ids
}

// TestClusterList: the tenant's executions on every node show through
// any node; with one node killed the list is partial and names it, and
// termgate ls says so on stderr and exits 0.
func TestClusterList(t *testing.T) {
	serveFromEnv()
	c := newCluster(t, 3)
	var ids []string
	needRouting(t, c.dial(t, c.url(0), nil, 0))
	for i := range c.nodes {
		_, id := c.apiStart(t, c.url(i), wire.Request{Command: "/bin/sh", Args: []string{"-c", echoScript}})
		if ownerOf(id) != c.names[i] {
			t.Fatalf("an unkeyed start on %s made %s", c.names[i], id)
		}
		ids = append(ids, id)
	}
	for _, base := range []string{c.url(0), c.url(1), c.url(2), c.lb} {
		status, body := c.apiGet(t, base, "/v1/executions")
		got := listIDs(body)
		if status != http.StatusOK || body["partial"] == true || len(got) != 3 {
			t.Errorf("list through %s: %d %v, want the three of %v", base, status, body, ids)
		}
		for _, id := range ids {
			if !slices.Contains(got, id) {
				t.Errorf("list through %s lacks %s: %v", base, id, got)
			}
		}
	}
	c.nodes[2].kill(syscall.SIGKILL)
	began := time.Now()
	status, body := c.apiGet(t, c.url(0), "/v1/executions")
	t.Logf("the partial list took %v", time.Since(began))
	got := listIDs(body)
	if status != http.StatusOK || body["partial"] != true || fmt.Sprint(body["unreachable"]) != "[n2]" ||
		!slices.Contains(got, ids[0]) || !slices.Contains(got, ids[1]) || slices.Contains(got, ids[2]) {
		t.Errorf("list with n2 killed: %d %v, want partial, unreachable [n2], the executions of n0 and n1", status, body)
	}
	code, stdout, stderr := runCLI(t, "", "ls", "--url", c.url(1), "--token", c.tok)
	if code != 0 || !strings.Contains(stdout, ids[0]) || !strings.Contains(stderr, "termgate: partial list: n2 did not answer") {
		t.Errorf("termgate ls with n2 killed: status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	c.nodes[2].start() // its keeper kept the execution
	// n0 skips n2 for a second after a failure (passive health): partial
	// meanwhile, and whole again after.
	until(t, "the list is whole with n2 back", func() bool {
		status, body := c.apiGet(t, c.url(0), "/v1/executions")
		return status == http.StatusOK && body["partial"] != true && slices.Contains(listIDs(body), ids[2])
	})
}

// TestClusterKilledNode: with the owner's serve killed -9 (its keeper
// lives on), attaches through another node are unavailable within a
// bounded wait, the API answers 503 unavailable, and a relayed client is
// detached; once the owner is back on its state directory the client
// resumes exactly: every byte once, every input line once.
func TestClusterKilledNode(t *testing.T) {
	serveFromEnv()
	c := newCluster(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	needRouting(t, c.dial(t, c.url(0), nil, 0))
	_, id := c.apiStart(t, c.url(2), wire.Request{Command: "/bin/sh", Args: []string{"-c", echoScript}})
	var logs sandboxtest.SyncBuffer
	relayed := c.dial(t, c.url(0), &logs, 0)
	f := follow(ctx, mustAttach(t, ctx, relayed, id, false))
	until(t, "ready", func() bool { return f.output() == "ready\n" })
	f.e.WriteContext(ctx, []byte("a\n"))
	until(t, "got:a", func() bool { return strings.HasSuffix(f.output(), "got:a\n") })

	c.nodes[2].kill(syscall.SIGKILL)
	killed := time.Now()
	other := c.dial(t, c.url(1), nil, 0)
	var code string
	unavailable := sandboxtest.Eventually(t, 10*time.Second, func() bool {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		defer acancel()
		a, err := other.Attach(actx, id, 0, true)
		if err == nil {
			a.Detach(actx)
		}
		code = errCode(err)
		return code == wire.CodeUnavailable
	})
	t.Logf("attach through n1 answered %q %v after the kill", code, time.Since(killed))
	if !unavailable {
		t.Fatalf("an attach through n1 to the killed node's %s: %q, want unavailable", id, code)
	}
	for _, base := range []string{c.url(0), c.lb} {
		if status, body := c.apiGet(t, base, "/v1/executions/"+id); status != http.StatusServiceUnavailable || body["error"] != wire.CodeUnavailable {
			t.Errorf("GET %s through %s with its node killed: %d %v, want 503 unavailable", id, base, status, body)
		}
	}
	until(t, "the relayed client is detached", func() bool { return strings.Contains(logs.String(), "the server detached the execution") })
	f.e.WriteContext(ctx, []byte("b\n")) // while the owner is down

	c.nodes[2].start()
	f.e.WriteContext(ctx, []byte("c\nquit\n"))
	f.ended(t, ctx)
	if want := "ready\ngot:a\ngot:b\ngot:c\ngot:quit\n"; f.err != nil || f.exit == nil || f.exit.Code != 7 || f.output() != want {
		t.Errorf("after the owner came back: exit %+v, err %v, output %q, want %q", f.exit, f.err, f.output(), want)
	}
}

// freeze stops pid (SIGSTOP) and returns once every thread of it is
// stopped: the kernel stops the others only when the thread the signal
// woke runs, and on a busy machine the rest may serve a request first.
// The test's cleanup continues it, before the node's cleanup kills it.
func freeze(t *testing.T, pid int) {
	t.Helper()
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	until(t, fmt.Sprintf("every thread of %d stopped", pid), func() bool {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		if err != nil || len(tasks) == 0 {
			return false
		}
		for _, task := range tasks {
			b, err := os.ReadFile(task)
			// The state follows the command's closing parenthesis.
			if i := bytes.LastIndexByte(b, ')'); err != nil || i < 0 || !bytes.HasPrefix(b[i:], []byte(") T")) {
				return false
			}
		}
		return true
	})
}

// TestClusterFrozenNode: with the owner's serve stopped (SIGSTOP), a
// relayed client is detached by the relay's pings, a client connected to
// the owner itself through the load balancer (?node=) notices by its own
// pings, and attaches through another node are unavailable after the
// peer timeout; after SIGCONT both resume exactly.
func TestClusterFrozenNode(t *testing.T) {
	serveFromEnv()
	c := newCluster(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	needRouting(t, c.dial(t, c.url(0), nil, 0))
	_, id := c.apiStart(t, c.url(1), wire.Request{Command: "/bin/sh", Args: []string{"-c", echoScript}})
	var relayLog, directLog sandboxtest.SyncBuffer
	writer := follow(ctx, mustAttach(t, ctx, c.dial(t, c.url(0), &relayLog, 0), id, false))
	direct := c.dial(t, c.lb+"?node=n1", &directLog, 300*time.Millisecond)
	if got := direct.Server().Node; got != "n1" {
		t.Fatalf("a connection through the LB with ?node=n1 served by %q", got)
	}
	viewer := follow(ctx, mustAttach(t, ctx, direct, id, true))
	until(t, "ready", func() bool { return writer.output() == "ready\n" && viewer.output() == "ready\n" })

	serve := c.nodes[1].cur.Process.Pid
	freeze(t, serve)
	stopped := time.Now()
	writer.e.WriteContext(ctx, []byte("a\n")) // while frozen
	until(t, "the relayed client is detached", func() bool { return strings.Contains(relayLog.String(), "the server detached the execution") })
	t.Logf("relayed client detached %v after SIGSTOP", time.Since(stopped))
	until(t, "the direct client notices by its pings", func() bool { return strings.Contains(directLog.String(), "does not answer pings") })
	t.Logf("direct client noticed %v after SIGSTOP", time.Since(stopped))
	other := c.dial(t, c.url(2), nil, 0)
	actx, acancel := context.WithTimeout(ctx, 20*time.Second)
	_, err := other.Attach(actx, id, 0, true)
	acancel()
	if errCode(err) != wire.CodeUnavailable {
		t.Errorf("attach through n2 to the frozen node's %s: %v, want unavailable", id, err)
	}

	syscall.Kill(serve, syscall.SIGCONT)
	writer.e.WriteContext(ctx, []byte("b\nquit\n"))
	writer.ended(t, ctx)
	viewer.ended(t, ctx)
	want := "ready\ngot:a\ngot:b\ngot:quit\n"
	for name, f := range map[string]*follower{"relayed writer": writer, "direct viewer": viewer} {
		if f.err != nil || f.exit == nil || f.exit.Code != 7 || f.output() != want {
			t.Errorf("%s after SIGCONT: exit %+v, err %v, output %q, want %q", name, f.exit, f.err, f.output(), want)
		}
	}
}

// TestClusterRestartedNode: a node restarted (SIGTERM) on its state
// directory brings its live executions back; one that had ended and
// whose retention ran out while it was down is gone through every node; with the state directory
// wiped (keeper killed first: a new epoch) its old IDs are gone, never
// not_found.
func TestClusterRestartedNode(t *testing.T) {
	serveFromEnv()
	c := newCluster(t, 3, "--retention", "2s")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	needRouting(t, c.dial(t, c.url(0), nil, 0))
	_, liveID := c.apiStart(t, c.url(2), wire.Request{Command: "/bin/sh", Args: []string{"-c", echoScript}})
	_, shortID := c.apiStart(t, c.url(2), wire.Request{Command: "/bin/sh", Args: []string{"-c", "echo done"}})
	until(t, "the short execution ends while n2 is up", func() bool {
		_, body := c.apiGet(t, c.url(2), "/v1/executions/"+shortID)
		return body["status"] != nil && body["status"] != "running"
	})
	f := follow(ctx, mustAttach(t, ctx, c.dial(t, c.url(0), nil, 0), liveID, false))
	until(t, "ready", func() bool { return f.output() == "ready\n" })

	c.nodes[2].kill(syscall.SIGTERM) // a restart: the executions live on in the keeper
	time.Sleep(3 * time.Second)      // the short one's 2s retention runs out while n2 is down
	c.nodes[2].start()
	f.e.WriteContext(ctx, []byte("back\nquit\n"))
	f.ended(t, ctx)
	if want := "ready\ngot:back\ngot:quit\n"; f.err != nil || f.exit == nil || f.exit.Code != 7 || f.output() != want {
		t.Errorf("the live execution after the restart: exit %+v, err %v, output %q, want %q", f.exit, f.err, f.output(), want)
	}
	expectGone := func(what, id string) {
		t.Helper()
		for _, base := range []string{c.url(0), c.url(1), c.url(2), c.lb} {
			if status, body := c.apiGet(t, base, "/v1/executions/"+id); status != http.StatusGone || body["error"] != wire.CodeGone {
				t.Errorf("%s %s through %s: %d %v, want 410 gone", what, id, base, status, body)
			}
			actx, acancel := context.WithTimeout(ctx, 20*time.Second)
			_, err := c.dial(t, base, nil, 0).Attach(actx, id, 0, true)
			acancel()
			if !errors.Is(err, client.ErrGone) {
				t.Errorf("attach %s %s through %s: %v, want gone", what, id, base, err)
			}
		}
	}
	expectGone("expired while down", shortID)

	_, wipedID := c.apiStart(t, c.url(2), wire.Request{Command: "/bin/sh", Args: []string{"-c", echoScript}})
	c.wipe(2)
	c.nodes[2].start()
	expectGone("on a wiped state directory", wipedID)
}

// wipe ends node i for good, its keeper first and then serve, and
// removes its state directory: the node restarts as a new epoch.
func (c *testCluster) wipe(i int) {
	t, n := c.t, c.nodes[i]
	t.Helper()
	for _, pid := range n.keepers() {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	n.kill(syscall.SIGKILL)
	until(t, "the keeper is gone", func() bool { return len(n.keepers()) == 0 })
	n.unmountWorkspaces()
	if err := os.RemoveAll(n.state); err != nil {
		t.Fatal(err)
	}
}

// keyWithFirst is a key whose rendezvous rank for tenant acme puts first
// first, and the runner-up.
func keyWithFirst(t *testing.T, prefix, first string, members []string) (string, string) {
	t.Helper()
	for i := range 10000 {
		key := fmt.Sprintf("%s-%d", prefix, i)
		if r := cluster.Rank("acme", key, members); r[0] == first {
			return key, r[1]
		}
	}
	t.Fatalf("no key ranks %s first", first)
	return "", ""
}

// TestClusterKeyedStart: a keyed start goes to the key's first node
// whichever node receives it, and its retry through another node gives
// the same execution; with that node killed, a new key of it lands on
// the runner-up, and its retries, also after the first node is back,
// give the runner-up's execution.
func TestClusterKeyedStart(t *testing.T) {
	serveFromEnv()
	c := newCluster(t, 3)
	needRouting(t, c.dial(t, c.url(0), nil, 0))
	via0, via2 := c.url(0), c.url(2)
	startKey := func(base, key string) string {
		t.Helper()
		_, id := c.apiStart(t, base, wire.Request{ID: key, Command: "/bin/sh", Args: []string{"-c", echoScript}})
		return id
	}
	k1, _ := keyWithFirst(t, "first", "n1", c.names)
	id1 := startKey(via0, k1)
	if ownerOf(id1) != "n1" || !strings.HasSuffix(id1, "~"+k1) {
		t.Fatalf("key %s started through n0 as %s, want on n1", k1, id1)
	}
	if again := startKey(via2, k1); again != id1 {
		t.Fatalf("key %s retried through n2: %s, want %s", k1, again, id1)
	}

	c.nodes[1].kill(syscall.SIGKILL)
	k2, runnerUp := keyWithFirst(t, "second", "n1", c.names)
	id2 := startKey(via0, k2)
	if ownerOf(id2) != runnerUp {
		t.Fatalf("key %s started with n1 down as %s, want on the runner-up %s", k2, id2, runnerUp)
	}
	if again := startKey(via2, k2); again != id2 {
		t.Fatalf("key %s retried through n2 with n1 down: %s, want %s", k2, again, id2)
	}
	c.nodes[1].start()
	if again := startKey(via0, k2); again != id2 {
		t.Fatalf("key %s retried with n1 back: %s, want the runner-up's %s", k2, again, id2)
	}
	// n2 marked n1 down when its probe failed during the outage; a probe
	// asks a node marked down all the same, so a retry at once finds k1's
	// execution on n1.
	if again := startKey(via2, k1); again != id1 {
		t.Fatalf("key %s retried with n1 back: %s, want %s", k1, again, id1)
	}
}

// cliRun is termgate args run in this process, as a user would: its exit
// status and what it wrote.
type cliRun struct {
	code           int
	stdout, stderr bytes.Buffer
	took           time.Duration
}

// TestClusterFrozenOwnerBehindHAProxy: with the owner's serve stopped
// (SIGSTOP), a request HAProxy routes to it by its ID before its checks
// mark it down fails within HAProxy's timeouts (sized against
// --peer-timeout) instead of hanging until the node resumes; and a
// termgate attach --read-only through another node waits out the
// unavailable answers within its --reconnect and follows the execution
// to its end once the owner is back.
func TestClusterFrozenOwnerBehindHAProxy(t *testing.T) {
	serveFromEnv()
	c := newCluster(t, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	needRouting(t, c.dial(t, c.url(0), nil, 0))
	_, id := c.apiStart(t, c.url(1), wire.Request{Command: "/bin/sh", Args: []string{"-c", "echo ready; sleep 2; echo done; exit 3"}})
	if status, _ := c.apiGet(t, c.lb, "/v1/executions/"+id); status != http.StatusOK {
		t.Fatalf("GET %s through the LB: %d", id, status)
	}

	serve := c.nodes[1].cur.Process.Pid
	freeze(t, serve)
	stopped := time.Now()
	attach := &cliRun{}
	attached := make(chan struct{})
	go func() {
		defer close(attached)
		err := run(ctx, []string{"attach", "--read-only", "--id", id, "--url", c.url(0), "--token", c.tok, "--reconnect", "1m"},
			strings.NewReader(""), &attach.stdout, &attach.stderr)
		attach.code, attach.took = exitCode(err, &attach.stderr), time.Since(stopped)
	}()

	// Sent at once, so that HAProxy's checks have not marked n1 down yet:
	// the ID routes it to n1 itself.
	hc := &http.Client{Timeout: 30 * time.Second}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.lb+"/v1/executions/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+c.tok)
	t0 := time.Now()
	resp, err := hc.Do(req)
	took := time.Since(t0)
	if err != nil {
		t.Errorf("GET %s through the LB with its owner frozen: no answer after %v: %v", id, took, err)
	} else {
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		t.Logf("GET through the LB with the owner frozen: %d %v after %v (Retry-After %q)", resp.StatusCode, body, took, resp.Header.Get("Retry-After"))
		if resp.StatusCode == http.StatusOK || body["error"] != wire.CodeUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Errorf("GET through the LB with the owner frozen: %d %v, want unavailable with Retry-After", resp.StatusCode, body)
		}
	}

	time.Sleep(3 * time.Second) // three peer timeouts: the attach was answered unavailable meanwhile
	select {
	case <-attached:
		t.Errorf("termgate attach exited %d after %v while the owner was frozen, within its --reconnect 1m: %s", attach.code, attach.took, attach.stderr.String())
	default:
	}
	syscall.Kill(serve, syscall.SIGCONT)
	select {
	case <-attached:
	case <-ctx.Done():
		t.Fatalf("termgate attach did not end after SIGCONT: %s", attach.stderr.String())
	}
	t.Logf("termgate attach: exit %d after %v; stderr %q", attach.code, attach.took, attach.stderr.String())
	if attach.code != 3 || attach.stdout.String() != "ready\ndone\n" {
		t.Errorf("termgate attach: exit %d, output %q, want 3 and %q; stderr %q", attach.code, attach.stdout.String(), "ready\ndone\n", attach.stderr.String())
	}
}
