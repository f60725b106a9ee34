package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// previewEnv is a gateway over the real sandbox (tweaked) running
// testdata/wsecho on its sandbox's 127.0.0.1:8300.
func previewEnv(t *testing.T, tweak func(*Config)) (*testEnv, string) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	sandboxtest.Need(t, "go", err)
	ws := sandboxtest.Dir(t)
	build := exec.Command(goTool, "build", "-o", filepath.Join(ws, "wsecho"), "./testdata/wsecho")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build wsecho: %v: %s", err, out)
	}
	e := newEnv(t, tweak)
	info, err := e.sup.Start(t.Context(), "acme", "web", session.Spec{
		Policy: sandbox.Policy{Command: []string{"/workspace/wsecho", "127.0.0.1:8300"}, Workspace: ws},
		Ring:   replay.Config{MaxBytes: 1 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitListening(t, e, info.ID, 1)
	return e, info.ID
}

// apiCall makes an HTTP API request with tok and decodes its answer.
func (e *testEnv) apiCall(t *testing.T, method, path, tok string, body any, into any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, e.http.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := e.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if into != nil {
		json.NewDecoder(resp.Body).Decode(into)
	}
	return resp.StatusCode
}

// getText GETs u with client and returns the status and body.
func getText(t *testing.T, client *http.Client, u string, header http.Header) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestPathPreview: a preview's URL opens the program's page once its
// secret moved to a cookie; the program sees its own loopback as the
// host, neither the gateway's token nor the preview's cookie, and sets
// no cookie on the gateway's origin; a WebSocket upgrade is proxied; a
// visit without the secret is refused, a revoked preview is gone, and a
// token without exec:forward makes none.
func TestPathPreview(t *testing.T) {
	t.Parallel()
	e, id := previewEnv(t, nil)
	tok := e.token(t, "acme", ScopeForward, "exec:attach")
	var p apiPreview
	if code := e.apiCall(t, http.MethodPost, "/v1/executions/"+id+"/ports/8300/preview", tok, map[string]int{"ttl_seconds": 600}, &p); code != http.StatusCreated {
		t.Fatalf("POST preview: %d", code)
	}
	u, err := url.Parse(p.URL)
	if err != nil || !strings.HasPrefix(u.Path, previewPath+p.Name+"/") || u.Query().Get(previewCookie) == "" {
		t.Fatalf("preview URL %q", p.URL)
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	code, body, h := getText(t, browser, p.URL, http.Header{"Authorization": {"Bearer " + tok}})
	if code != 200 || !strings.HasPrefix(body, "path=/ host=127.0.0.1:8300 auth= cookie= xfh=") {
		t.Errorf("the page through the preview: %d %q", code, body)
	}
	if sc := h.Values("Set-Cookie"); len(sc) != 0 {
		t.Errorf("the program set cookies on the gateway's origin: %q", sc)
	}
	base := strings.TrimSuffix(p.URL, "?"+u.RawQuery)
	if code, _, _ := getText(t, http.DefaultClient, base, nil); code != http.StatusForbidden {
		t.Errorf("a visit without the secret: %d, want 403", code)
	}
	if code, _, _ := getText(t, http.DefaultClient, base+"?"+previewCookie+"=wrong", nil); code != http.StatusForbidden {
		t.Errorf("a visit with a wrong secret: %d, want 403", code)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "echo"
	hdr := http.Header{}
	for _, c := range jar.Cookies(u) {
		hdr.Add("Cookie", c.Name+"="+c.Value)
	}
	ws, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatalf("a WebSocket through the preview: %v", err)
	}
	ws.Write(ctx, websocket.MessageText, []byte("ping"))
	if _, b, err := ws.Read(ctx); err != nil || string(b) != "ping" {
		t.Errorf("the echo through the preview: %q, %v", b, err)
	}
	ws.Close(websocket.StatusNormalClosure, "")

	if code := e.apiCall(t, http.MethodDelete, "/v1/executions/"+id+"/ports/8300/preview", tok, nil, nil); code != http.StatusNoContent {
		t.Errorf("DELETE preview: %d", code)
	}
	if code, _, _ := getText(t, browser, base, nil); code != http.StatusNotFound {
		t.Errorf("a revoked preview: %d, want 404", code)
	}
	noForward := e.token(t, "acme", allScopes...)
	if code := e.apiCall(t, http.MethodPost, "/v1/executions/"+id+"/ports/8300/preview", noForward, nil, nil); code != http.StatusForbidden {
		t.Errorf("a preview without exec:forward: %d, want 403", code)
	}
	if code := e.apiCall(t, http.MethodPost, "/v1/executions/"+id+"/ports/8300/preview", tok, map[string]int{"ttl_seconds": 90000}, nil); code != http.StatusBadRequest {
		t.Errorf("a preview of 25 h: %d, want 400", code)
	}
}

// TestHostPreview: with a preview domain, a preview is its own origin:
// NAME.DOMAIN; the program's cookies pass, except one for a whole
// domain.
func TestHostPreview(t *testing.T) {
	t.Parallel()
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "the page") })
	e, id := previewEnv(t, func(c *Config) { c.PreviewDomain, c.Page = "preview.test", page })
	tok := e.token(t, "acme", ScopeForward)
	var p apiPreview
	if code := e.apiCall(t, http.MethodPost, "/v1/executions/"+id+"/ports/8300/preview", tok, nil, &p); code != http.StatusCreated {
		t.Fatalf("POST preview: %d", code)
	}
	u, _ := url.Parse(p.URL)
	gw, _ := url.Parse(e.http.URL)
	if u.Hostname() != p.Name+".preview.test" || u.Port() != gw.Port() || u.Path != "/" {
		t.Fatalf("preview URL %q, want NAME.preview.test on the gateway's port %s", p.URL, gw.Port())
	}
	// The test has no DNS for preview.test: the gateway is reached by its
	// address, with the preview's Host.
	first := "http://" + gw.Host + "/?" + u.RawQuery
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodGet, first, nil)
	req.Host = u.Host
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(cookies) != 1 || cookies[0].Name != previewCookie || !cookies[0].HttpOnly || cookies[0].Path != "/" {
		t.Fatalf("first visit: %d %v", resp.StatusCode, cookies)
	}
	req, _ = http.NewRequest(http.MethodGet, "http://"+gw.Host+"/page", nil)
	req.Host = u.Host
	req.AddCookie(cookies[0])
	req.AddCookie(&http.Cookie{Name: "mine", Value: "2"})
	resp, err = e.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "path=/page ") || !strings.Contains(string(body), "cookie=mine=2 ") || strings.Contains(string(body), previewCookie) {
		t.Errorf("the page: %q", body)
	}
	if sc := resp.Header.Values("Set-Cookie"); len(sc) != 1 || !strings.HasPrefix(sc[0], "app=1") {
		t.Errorf("the program's cookies: %q, want app=1 alone", sc)
	}
	// The gateway's own routes and its page stay where they were.
	if code, body, _ := getText(t, http.DefaultClient, e.http.URL+"/healthz", nil); code != 200 || body != "ok\n" {
		t.Errorf("healthz beside host previews: %d %q", code, body)
	}
	if code, body, _ := getText(t, http.DefaultClient, e.http.URL+"/", nil); code != 200 || body != "the page" {
		t.Errorf("the page beside host previews: %d %q", code, body)
	}
}

// TestPreviewOfNodeInspector: node --inspect in a sandbox is reached
// through a host-based preview as a DevTools client reaches it: its
// target list over HTTP, then the target's WebSocket, where the Chrome
// DevTools protocol evaluates an expression in the program.
func TestPreviewOfNodeInspector(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	sandboxtest.Need(t, "node", err)
	e := newEnv(t, func(c *Config) { c.PreviewDomain = "preview.test" })
	info, err := e.sup.Start(t.Context(), "acme", "inspected", session.Spec{
		Policy: sandbox.Policy{Command: []string{node, "--inspect=127.0.0.1:9229", "-e", "globalThis.answer = 42; setInterval(() => {}, 1000)"}, Workspace: sandboxtest.Dir(t)},
		Ring:   replay.Config{MaxBytes: 1 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitListening(t, e, info.ID, 1)
	tok := e.token(t, "acme", ScopeForward)
	var p apiPreview
	if code := e.apiCall(t, http.MethodPost, "/v1/executions/"+info.ID+"/ports/9229/preview", tok, nil, &p); code != http.StatusCreated {
		t.Fatalf("POST preview: %d", code)
	}
	u, _ := url.Parse(p.URL)
	gw, _ := url.Parse(e.http.URL)
	secret := &http.Cookie{Name: previewCookie, Value: u.Query().Get(previewCookie)}
	req, _ := http.NewRequest(http.MethodGet, "http://"+gw.Host+"/json/list", nil)
	req.Host = u.Host
	req.AddCookie(secret)
	resp, err := e.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var targets []struct {
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	err = json.NewDecoder(resp.Body).Decode(&targets)
	resp.Body.Close()
	if err != nil || len(targets) != 1 {
		t.Fatalf("the inspector's targets: %v, %v", targets, err)
	}
	target, _ := url.Parse(targets[0].WebSocketDebuggerURL)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	hdr := http.Header{"Host": {u.Host}}
	hdr.Add("Cookie", secret.String())
	ws, _, err := websocket.Dial(ctx, "ws://"+gw.Host+target.Path, &websocket.DialOptions{HTTPHeader: hdr, Host: u.Host})
	if err != nil {
		t.Fatalf("the target's WebSocket through the preview: %v", err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(-1)
	// The inspector listens before node ran its script: ask until the
	// script has set the answer.
	var last []byte
	for i := 1; i <= 100; i++ {
		ws.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"id":%d,"method":"Runtime.evaluate","params":{"expression":"globalThis.answer + 1"}}`, i))
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var m struct {
				ID     int `json:"id"`
				Result struct {
					Result struct {
						Value json.RawMessage `json:"value"`
					} `json:"result"`
				} `json:"result"`
			}
			json.Unmarshal(b, &m)
			if m.ID != i {
				continue
			}
			if string(m.Result.Result.Value) == "43" {
				return
			}
			last = b
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("Runtime.evaluate never answered 43: %s", last)
}

// TestPreviewDomainIsADNSName: a preview domain that is no DNS name is
// refused at start, with what is wanted.
func TestPreviewDomainIsADNSName(t *testing.T) {
	t.Parallel()
	for _, d := range []string{"preview.example.com:8443", "https://preview.example.com", "*.preview.example.com", "a..b", "-a.b", "a_b.c", "preview.example.com/"} {
		sup, err := session.New(session.Config{Launcher: &sessiontest.Launcher{}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = NewServer(Config{Supervisor: sup, Auth: &auth.Authenticator{}, WorkspaceRoot: t.TempDir(), PreviewDomain: d})
		sup.Close(t.Context())
		if err == nil || !strings.Contains(err.Error(), "must be a DNS name") {
			t.Errorf("preview domain %q: %v, want it refused", d, err)
		}
	}
	for _, d := range []string{"localhost", "preview.example.com", "P-1.example"} {
		if !dnsName(d) {
			t.Errorf("preview domain %q refused", d)
		}
	}
}
