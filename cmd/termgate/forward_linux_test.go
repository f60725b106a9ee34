package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// forwardCLI runs termgate forward until the test ends, and returns the
// local address of its first forward.
func forwardCLI(t *testing.T, args ...string) (addr string, stderr *sandboxtest.SyncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out sandboxtest.SyncBuffer
	stderr = new(sandboxtest.SyncBuffer)
	done := make(chan error, 1)
	go func() { done <- run(ctx, append([]string{"forward"}, args...), strings.NewReader(""), &out, stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("forward did not stop")
		}
	})
	re := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) -> `)
	var m []string
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool { m = re.FindStringSubmatch(out.String()); return m != nil || len(done) > 0 }) || m == nil {
		t.Fatalf("forward printed %q, %q", out.String(), stderr.String())
	}
	return m[1], stderr
}

// TestForwardAndPortsCommands: a web server a program runs in its
// sandbox is listed by termgate ports and reached through termgate
// forward from the host, twice over one forward (a stream each); a
// token without exec:forward gets nothing through, and is told why.
func TestForwardAndPortsCommands(t *testing.T) {
	t.Parallel()
	_, err := exec.LookPath("python3")
	sandboxtest.Need(t, "python3", err)
	g := startGateway(t)
	tok := g.token(t, "acme", allScopes+" exec:forward")
	ran := make(chan string, 1)
	go func() {
		code, out, stderr := runCLI(t, "", "run", "--url", g.url, "--token", tok, "--id", "web", "--", "/bin/sh", "-c", "exec python3 -m http.server --bind 127.0.0.1 8000")
		ran <- fmt.Sprintf("run: %d %q %q", code, out, stderr)
	}()
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool {
		code, out, _ := runCLI(t, "", "ports", "--url", g.url, "--token", tok, "web")
		return code == 0 && out == "8000\t127.0.0.1\n"
	}) {
		code, out, stderr := runCLI(t, "", "ports", "--url", g.url, "--token", tok, "web")
		_, ls, _ := runCLI(t, "", "ls", "--url", g.url, "--token", tok)
		select {
		case r := <-ran:
			t.Log(r)
		default:
		}
		t.Fatalf("ports: %d %q %q; ls %q", code, out, stderr, ls)
	}
	defer runCLI(t, "", "cancel", "--url", g.url, "--token", tok, "--id", "web")
	addr, _ := forwardCLI(t, "--url", g.url, "--token", tok, "web", "0:8000")
	for range 2 {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), "Directory listing") {
			t.Errorf("GET / through the forward: %d %q", resp.StatusCode, body)
		}
	}

	// A preview of the same port, opened as a browser would, then revoked.
	code, out, errs := runCLI(t, "", "preview", "--url", g.url, "--token", tok, "--ttl", "10m", "web", "8000")
	if code != 0 || !strings.HasPrefix(out, g.url+"/v1/preview/") {
		t.Fatalf("preview: %d %q %q", code, out, errs)
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	resp, err := browser.Get(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "Directory listing") {
		t.Errorf("GET through the preview: %d %q", resp.StatusCode, body)
	}
	if code, _, errs := runCLI(t, "", "preview", "--url", g.url, "--token", tok, "--revoke", "web", "8000"); code != 0 {
		t.Errorf("preview --revoke: %d %q", code, errs)
	}
	if resp, err := browser.Get(resp.Request.URL.String()); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("a revoked preview: %v, %v", resp, err)
	}

	noForward := g.token(t, "acme", allScopes)
	addr, stderr := forwardCLI(t, "--url", g.url, "--token", noForward, "web", "0:8000")
	if resp, err := http.Get("http://" + addr + "/"); err == nil {
		resp.Body.Close()
		t.Errorf("a token without exec:forward got through: %d", resp.StatusCode)
	}
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool { return strings.Contains(stderr.String(), "exec:forward") }) {
		t.Errorf("forward without the scope said %q", stderr.String())
	}
}

func TestForwardUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"forward"}, {"forward", "web"}, {"forward", "web", "0"}, {"forward", "web", "70000"},
		{"forward", "web", "a:80"}, {"ports"}, {"ports", "a", "b"},
	} {
		if code, _, stderr := runCLI(t, "", args...); code != 2 || stderr == "" {
			t.Errorf("termgate %q: status %d, stderr %q; want 2 and a message", args, code, stderr)
		}
	}
}

// TestForwardAcrossARestart: termgate forward keeps its listener while
// the gateway restarts (SIGTERM: the executions live on), reconnects,
// and the next connections reach the port again.
func TestForwardAcrossARestart(t *testing.T) {
	serveFromEnv()
	t.Parallel()
	_, err := exec.LookPath("python3")
	sandboxtest.Need(t, "python3", err)
	n := newDurableNode(t)
	n.start()
	tok := gatewayUnderTest{secretFile: n.secretFile}.token(t, "acme", allScopes+" exec:forward")
	if code, body := n.api(t, http.MethodPost, "/v1/executions", tok, map[string]any{
		"id": "web", "command": "/bin/sh", "args": []string{"-c", "exec python3 -m http.server --bind 127.0.0.1 8000"},
	}); code != http.StatusCreated {
		t.Fatalf("start: %d %v", code, body)
	}
	addr, _ := forwardCLI(t, "--url", "http://"+n.addr, "--token", tok, "--reconnect", "2m", "web", "0:8000")
	get := func() bool {
		c := &http.Client{Timeout: 10 * time.Second}
		resp, err := c.Get("http://" + addr + "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && strings.Contains(string(body), "Directory listing")
	}
	if !sandboxtest.Eventually(t, 30*time.Second, get) {
		t.Fatal("the forward never reached the server")
	}
	n.kill(syscall.SIGTERM)
	n.start()
	if !sandboxtest.Eventually(t, 60*time.Second, get) {
		t.Error("the forward did not reach the server after the gateway restarted")
	}
}

// TestClusterForward: a forward and a ports listing through the node
// that does not own the execution reach its port: the stream is relayed
// to the owner.
func TestClusterForward(t *testing.T) {
	serveFromEnv()
	_, err := exec.LookPath("python3")
	sandboxtest.Need(t, "python3", err)
	c := newCluster(t, 2)
	tok := gatewayUnderTest{secretFile: c.nodes[0].secretFile}.token(t, "acme", allScopes+" exec:forward")
	id := startOnN1(t, c, tok, "web", "exec python3 -m http.server --bind 127.0.0.1 8000")
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool {
		code, out, _ := runCLI(t, "", "ports", "--url", c.url(1), "--token", tok, id)
		return code == 0 && strings.HasPrefix(out, "8000\t")
	}) {
		t.Fatal("the owner never listed port 8000")
	}
	addr, _ := forwardCLI(t, "--url", c.url(0), "--token", tok, id, "0:8000")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "Directory listing") {
		t.Errorf("GET through a relayed forward: %d %q", resp.StatusCode, body)
	}
}

// TestClusterFiles: the files of an execution another node owns are
// served by that node through the one the client reached: a file PUT
// beside the execution through n0 is in n1's workspace of the tenant.
func TestClusterFiles(t *testing.T) {
	serveFromEnv()
	c := newCluster(t, 2)
	tok := gatewayUnderTest{secretFile: c.nodes[0].secretFile}.token(t, "acme", allScopes+" files:read files:write")
	id := startOnN1(t, c, tok, "files", "sleep 120")
	do := func(method, base, path, body string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, b := do(http.MethodPut, c.url(0), "/v1/executions/"+id+"/files/relayed.txt", "through n0"); code != http.StatusCreated {
		t.Fatalf("PUT through n0: %d %s", code, b)
	}
	// A file larger than any message of the API streams through the relay.
	big := strings.Repeat("0123456789abcdef", 3<<16) // 3 MiB
	if code, b := do(http.MethodPut, c.url(0), "/v1/executions/"+id+"/files/big.txt", big); code != http.StatusCreated {
		t.Errorf("PUT of 3 MiB through n0: %d %.200s", code, b)
	}
	if code, b := do(http.MethodGet, c.url(0), "/v1/executions/"+id+"/files/big.txt", ""); code != http.StatusOK || b != big {
		t.Errorf("GET of 3 MiB through n0: %d, %d bytes", code, len(b))
	}
	// A client whose body breaks on the way says nothing of n1's health:
	// the next request through n0 is served.
	broken := io.MultiReader(strings.NewReader(big), readerFunc(func([]byte) (int, error) { return 0, errors.New("cut") }))
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, c.url(0)+"/v1/executions/"+id+"/files/broken.txt", broken)
	req.Header.Set("Authorization", "Bearer "+tok)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("a PUT whose body broke: %s", resp.Status)
	}
	if code, b := do(http.MethodGet, c.url(0), "/v1/executions/"+id+"/files/relayed.txt", ""); code != http.StatusOK {
		t.Errorf("after a client's broken body, n1 through n0: %d %s", code, b)
	}
	if code, b := do(http.MethodGet, c.url(1), "/v1/files/relayed.txt", ""); code != http.StatusOK || b != "through n0" {
		t.Errorf("n1's workspace: %d %q", code, b)
	}
	if code, _ := do(http.MethodGet, c.url(0), "/v1/files/relayed.txt", ""); code != http.StatusNotFound {
		t.Errorf("n0's own workspace has it: %d", code)
	}
	if code, b := do(http.MethodGet, c.url(0), "/v1/files/relayed.txt?node=n1", ""); code != http.StatusOK || b != "through n0" {
		t.Errorf("n1's workspace through n0 (node=n1): %d %q", code, b)
	}
	if code, _ := do(http.MethodGet, c.url(0), "/v1/files/relayed.txt?node=n9", ""); code != http.StatusNotFound {
		t.Errorf("node=n9: %d", code)
	}
	if code, b := do(http.MethodGet, c.url(0), "/v1/executions/"+id+"/files/relayed.txt", ""); code != http.StatusOK || b != "through n0" {
		t.Errorf("GET beside the execution through n0: %d %q", code, b)
	}
}

// TestClusterPreview: a preview of a port of an execution another node
// owns is made through the node the client reached, and its URL opens
// through that node too: the preview's node serves it behind.
func TestClusterPreview(t *testing.T) {
	serveFromEnv()
	_, err := exec.LookPath("python3")
	sandboxtest.Need(t, "python3", err)
	c := newCluster(t, 2)
	tok := gatewayUnderTest{secretFile: c.nodes[0].secretFile}.token(t, "acme", allScopes+" exec:forward")
	id := startOnN1(t, c, tok, "site", "exec python3 -m http.server --bind 127.0.0.1 8000")
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool {
		code, out, _ := runCLI(t, "", "ports", "--url", c.url(0), "--token", tok, id)
		return code == 0 && strings.HasPrefix(out, "8000\t")
	}) {
		t.Fatal("port 8000 never listed")
	}
	code, out, stderr := runCLI(t, "", "preview", "--url", c.url(0), "--token", tok, id, "8000")
	if code != 0 || !strings.HasPrefix(out, c.url(0)+"/v1/preview/") || !strings.Contains(out, "-n1/") {
		t.Fatalf("preview through n0: %d %q %q", code, out, stderr)
	}
	jar, _ := cookiejar.New(nil)
	resp, err := (&http.Client{Jar: jar, Timeout: 30 * time.Second}).Get(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "Directory listing") {
		t.Errorf("the preview opened through n0: %d %q", resp.StatusCode, body)
	}
}

// startOnN1 starts script on n1 of c, through n0: an execution is placed
// by its ID, so up to 8 IDs starting with prefix are tried, and the test
// is skipped when none lands on n1 (1 in 256).
func startOnN1(t *testing.T, c *testCluster, tok, prefix, script string) string {
	t.Helper()
	for i := range 8 {
		status, got := c.nodes[0].api(t, http.MethodPost, "/v1/executions", tok, map[string]any{
			"id": fmt.Sprint(prefix, "-", i), "command": "/bin/sh", "args": []string{"-c", script}})
		if status != http.StatusCreated {
			t.Fatalf("start %d: %d %v", i, status, got)
		}
		if id := got["id"].(string); ownerOf(id) == "n1" {
			return id
		}
	}
	t.Skip("no start of 8 was placed on n1")
	return ""
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
