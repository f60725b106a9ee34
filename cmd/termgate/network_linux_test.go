package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// api sends an HTTP API request to n with tok and a JSON body (nil for
// none), and returns the status and the decoded answer.
func (n *durableNode) api(t *testing.T, method, path, tok string, body any) (int, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+n.addr+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// eventsOf reads id's events until its exit: the output and the
// notices' messages.
func (n *durableNode) eventsOf(t *testing.T, tok, id string) (string, []string) {
	t.Helper()
	var out strings.Builder
	var notices []string
	after, incarnation := 0.0, ""
	for range 60 {
		status, body := n.api(t, http.MethodGet, fmt.Sprintf("/v1/executions/%s/events?after=%d&incarnation=%s&wait=5s", id, int64(after), incarnation), tok, nil)
		if status != http.StatusOK {
			t.Fatalf("events: %d %v", status, body)
		}
		evs, _ := body["events"].([]any)
		for _, e := range evs {
			ev := e.(map[string]any)
			switch ev["kind"] {
			case "output":
				b, _ := base64.StdEncoding.DecodeString(ev["data"].(string))
				out.Write(b)
			case "notice":
				notices = append(notices, ev["notice"].(map[string]any)["message"].(string))
			}
		}
		after, incarnation = body["next_after"].(float64), body["incarnation"].(string)
		if body["ended"] == true {
			return out.String(), notices
		}
	}
	t.Fatalf("%s did not end: %q", id, out.String())
	return "", nil
}

// TestNetworkPolicyEndToEnd: serve with two network policies. curl and
// Python's urllib in a sandbox reach what the policy allows through the
// proxy the sandbox finds in its environment, and are refused the rest
// with the reason, told as a notice and recorded in the audit trail. The
// scopes decide who may name a policy. After serve is killed (-9) and
// started again, the execution's proxy is served again, and a change of
// policy reaches its next connection. SIGHUP with a bad file keeps the
// policy's rules; with a good one, they change.
func TestNetworkPolicyEndToEnd(t *testing.T) {
	serveFromEnv()
	t.Parallel()
	for _, prog := range []string{"curl", "python3"} {
		_, err := exec.LookPath(prog)
		sandboxtest.Need(t, prog, err)
	}
	port := sandboxtest.HelloServers(t, "127.0.0.2", "127.0.0.3")
	dir := t.TempDir()
	agents, other := filepath.Join(dir, "agents.toml"), filepath.Join(dir, "other.toml")
	writeFile := func(path, data string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(agents, fmt.Sprintf("allow = [\"127.0.0.2:%d\"]\n", port))
	writeFile(other, fmt.Sprintf("allow = [\"127.0.0.3:%d\"]\n", port))
	auditPath := filepath.Join(dir, "audit.log")
	n := newDurableNode(t, "--network-policy", "agents="+agents, "--network-policy", "other="+other, "--audit-log", auditPath)
	n.start()
	g := gatewayUnderTest{secretFile: n.secretFile}
	tok := g.token(t, "acme", allScopes+" net:agents")
	anyTok := g.token(t, "acme", allScopes+" "+"net:*")
	plain := g.token(t, "acme", allScopes)

	for _, tc := range []struct {
		tok, network string
		status       int
		code         string
	}{
		{plain, "agents", http.StatusForbidden, "forbidden"},
		{tok, "other", http.StatusForbidden, "forbidden"},
		{tok, "nope", http.StatusBadRequest, "bad_request"},
		{anyTok, "host", http.StatusForbidden, "forbidden"},
	} {
		status, body := n.api(t, http.MethodPost, "/v1/executions", tc.tok, map[string]any{"command": "/bin/sh", "args": []string{"-c", "true"}, "network": tc.network})
		if status != tc.status || body["error"] != tc.code {
			t.Errorf("a start with network %q: %d %v, want %d %s", tc.network, status, body, tc.status, tc.code)
		}
	}

	script := fmt.Sprintf(`curl -sS http://127.0.0.2:%[1]d/; echo
curl -sS http://127.0.0.3:%[1]d/
python3 -c 'import urllib.request as u; print(u.urlopen("http://127.0.0.2:%[1]d/").read().decode())'
echo part one
i=0; until curl -fsS http://127.0.0.3:%[1]d/ >/dev/null 2>&1 || [ $i -ge 1200 ]; do sleep 0.05; i=$((i+1)); done
curl -sS http://127.0.0.3:%[1]d/; echo
curl -sS -o /dev/null -w '%%{http_code}\n' http://127.0.0.2:%[1]d/`, port)
	status, body := n.api(t, http.MethodPost, "/v1/executions", tok, map[string]any{"id": "net", "command": "/bin/sh", "args": []string{"-c", script}, "network": "agents"})
	if status != http.StatusCreated || body["network"] != "agents" {
		t.Fatalf("start: %d %v", status, body)
	}
	until(t, "part one", func() bool {
		_, body := n.api(t, http.MethodGet, "/v1/executions/net/events?after=0", tok, nil)
		evs, _ := body["events"].([]any)
		for _, e := range evs {
			if b, _ := base64.StdEncoding.DecodeString(fmt.Sprint(e.(map[string]any)["data"])); string(b) == "part one\n" {
				return true
			}
		}
		return false
	})

	n.kill(syscall.SIGKILL)
	n.start()
	if _, st := n.api(t, http.MethodGet, "/v1/executions/net/network", tok, nil); st["network"] != "agents" {
		t.Fatalf("network after the restart: %v", st)
	}
	if status, body := n.api(t, http.MethodPut, "/v1/executions/net/network", tok, map[string]string{"network": "other"}); status != http.StatusForbidden {
		t.Errorf("a change to other with net:agents only: %d %v, want 403", status, body)
	}
	status, body = n.api(t, http.MethodPut, "/v1/executions/net/network", anyTok, map[string]string{"network": "other"})
	if status != http.StatusOK || body["network"] != "other" || !strings.Contains(fmt.Sprint(body["kept"]), "kept") {
		t.Fatalf("change to other: %d %v", status, body)
	}
	out, notices := n.eventsOf(t, tok, "net")
	refusal := fmt.Sprintf("127.0.0.3:%d is a loopback address, which policy \"agents\" does not open", port)
	want := fmt.Sprintf("hello from 127.0.0.2\n%s\nhello from 127.0.0.2\npart one\nhello from 127.0.0.3\n403\n", refusal)
	if out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	joined := strings.Join(notices, "\n")
	if !strings.Contains(joined, "network: "+refusal) || !strings.Contains(joined, `the policy is now "other" (was "agents")`) {
		t.Errorf("notices %q, want the refusal and the change", notices)
	}

	// The audit trail: the refusal with its address, the change, and an
	// allowed connection with its rule.
	var refused, changed, allowed bool
	f, err := os.Open(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var rec map[string]any
		json.Unmarshal(sc.Bytes(), &rec)
		switch {
		case rec["event"] == "connect" && rec["outcome"] == "refused" && rec["address"] == "127.0.0.3" && rec["network"] == "agents" && rec["execution"] == "net":
			refused = true
		case rec["event"] == "connect" && rec["outcome"] == "ok" && rec["rule"] == fmt.Sprintf("127.0.0.2:%d", port):
			allowed = true
		case rec["event"] == "network" && rec["network"] == "other" && rec["reason"] == "was agents":
			changed = true
		}
	}
	if !refused || !allowed || !changed {
		t.Errorf("audit: refused %v, allowed %v, changed %v; want all", refused, allowed, changed)
	}

	// The change outlives another restart: the record keeps it.
	n.kill(syscall.SIGKILL)
	n.start()
	if _, st := n.api(t, http.MethodGet, "/v1/executions/net/network", tok, nil); st["network"] != "other" {
		t.Errorf("network after a second restart: %v, want other", st)
	}

	// SIGHUP: a bad file keeps agents' rules; a good one changes them.
	run := func(id, url string) string {
		t.Helper()
		status, body := n.api(t, http.MethodPost, "/v1/executions", tok, map[string]any{"id": id, "command": "/bin/sh", "args": []string{"-c", "curl -sS " + url}, "network": "agents"})
		if status != http.StatusCreated {
			t.Fatalf("start %s: %d %v", id, status, body)
		}
		out, _ := n.eventsOf(t, tok, id)
		return out
	}
	writeFile(agents, "allow = [\"127.0.0.3\n")
	n.hangup(`"msg":"network policies not all reloaded`, 1)
	if out := run("after-bad", fmt.Sprintf("http://127.0.0.2:%d/", port)); out != "hello from 127.0.0.2" {
		t.Errorf("agents after a bad file: %q, want its previous rules", out)
	}
	writeFile(agents, fmt.Sprintf("allow = [\"127.0.0.3:%d\"]\n", port))
	n.hangup(`"msg":"network policies reloaded"`, 1)
	if out := run("after-good", fmt.Sprintf("http://127.0.0.3:%d/", port)); out != "hello from 127.0.0.3" {
		t.Errorf("agents after a good file: %q, want its new rules", out)
	}
}

// TestClusterNetworkPolicies: a start with a network policy placed on
// any node runs under that node's policy, and once one node's policy
// file differs (changed, and reloaded there only), the hops between the
// nodes tell each which peer differs: /readyz says so on both.
func TestClusterNetworkPolicies(t *testing.T) {
	serveFromEnv()
	_, err := exec.LookPath("curl")
	sandboxtest.Need(t, "curl", err)
	port := sandboxtest.HelloServers(t, "127.0.0.2")
	file := filepath.Join(t.TempDir(), "web.toml")
	if err := os.WriteFile(file, fmt.Appendf(nil, "allow = [\"127.0.0.2:%d\"]\n", port), 0o644); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, 2, "--network-policy", "web="+file)
	tok := gatewayUnderTest{secretFile: c.nodes[0].secretFile}.token(t, "acme", allScopes+" net:web")
	for i := range 4 { // placed by their keys: both nodes, most likely
		body := map[string]any{"id": fmt.Sprint("web-", i), "command": "/bin/sh", "args": []string{"-c", fmt.Sprintf("curl -sS http://127.0.0.2:%d/", port)}, "network": "web"}
		status, got := c.nodes[0].api(t, http.MethodPost, "/v1/executions", tok, body)
		if status != http.StatusCreated || got["network"] != "web" {
			t.Fatalf("start %d through n0: %d %v", i, status, got)
		}
		id := got["id"].(string)
		owner := c.nodes[0]
		if ownerOf(id) == "n1" {
			owner = c.nodes[1]
		}
		if out, _ := owner.eventsOf(t, tok, id); out != "hello from 127.0.0.2" {
			t.Errorf("%s on %s: output %q", id, ownerOf(id), out)
		}
	}
	ready := func(i int) string {
		resp, err := http.Get(c.url(i) + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if r := ready(0); !strings.Contains(r, "network policies ") || strings.Contains(r, "differ") {
		t.Errorf("n0's readyz with the same policies: %q", r)
	}
	if err := os.WriteFile(file, fmt.Appendf(nil, "allow = [\"127.0.0.3:%d\"]\n", port), 0o644); err != nil {
		t.Fatal(err)
	}
	c.nodes[1].hangup(`"msg":"network policies reloaded"`, 1)
	// A bare ID neither holds: each node asks the other, a hop each way.
	c.apiGet(t, c.url(0), "/v1/executions/nowhere")
	c.apiGet(t, c.url(1), "/v1/executions/nowhere")
	if r := ready(0); !strings.Contains(r, "network policies differ on n1") {
		t.Errorf("n0's readyz once n1's policies differ: %q", r)
	}
	if r := ready(1); !strings.Contains(r, "network policies differ on n0") {
		t.Errorf("n1's readyz once its policies differ: %q", r)
	}
}
