package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/netpolicy"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
)

// helloServer serves "hello" over HTTP on ip and returns its port.
func helloServer(t *testing.T, ip string) int {
	t.Helper()
	ln, err := net.Listen("tcp4", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// newNetworkEnv is a gateway over the real sandbox with network policy
// "web" allowing 127.0.0.2:port.
func newNetworkEnv(t *testing.T, port int, tweak func(*Config)) *testEnv {
	t.Helper()
	file := filepath.Join(t.TempDir(), "web.toml")
	if err := os.WriteFile(file, fmt.Appendf(nil, "allow = [\"127.0.0.2:%d\"]\n", port), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := netpolicy.NewSet(map[string]string{"web": file})
	if err != nil {
		t.Fatal(err)
	}
	egress := &netpolicy.Egress{Set: set, Dialer: &netpolicy.Dialer{Timeout: 5 * time.Second}}
	return newEnvSession(t, session.Config{Launcher: session.SandboxLauncher(needLauncher(t)), Egress: egress}, func(c *Config) {
		c.Egress = egress
		if tweak != nil {
			tweak(c)
		}
	})
}

// TestNetworkStartOverWebSocket: a WebSocket start names a policy with
// its scope; a refused connection reaches the attached client as a
// notice; a start without the scope, with an unknown policy or asking
// for the host's network where it is not offered, is refused with the
// code the protocol names.
func TestNetworkStartOverWebSocket(t *testing.T) {
	t.Parallel()
	_, err := exec.LookPath("curl")
	sandboxtest.Need(t, "curl", err)
	port := helloServer(t, "127.0.0.2")
	e := newNetworkEnv(t, port, nil)
	c := e.dial(t, e.token(t, "acme", append(allScopes, ScopeNetworkPrefix+"web")...))
	defer c.close()
	script := fmt.Sprintf("curl -sS http://127.0.0.2:%d/; echo; curl -sS http://127.0.0.3:%d/", port, port)
	c.send(t, wire.Request{Type: wire.TypeStart, Req: "s", Command: "/bin/sh", Args: []string{"-c", script}, Network: "web", Attach: true})
	var out []byte
	var notices []string
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for exited := false; !exited; {
		f, err := c.read(ctx)
		switch {
		case err != nil:
			t.Fatalf("read: %v (output %q)", err, out)
		case f.out != nil:
			out = append(out, f.out.Data...)
		case f.msg.Type == wire.MsgError:
			t.Fatalf("error %s: %s", f.msg.Error, f.msg.Message)
		case f.msg.Type == wire.MsgEvent && f.msg.Event == wire.EventNotice && f.msg.Reason == wire.NoticeNetwork:
			notices = append(notices, f.msg.Message)
		case f.msg.Type == wire.MsgExit:
			exited = true
		}
	}
	if want := fmt.Sprintf("hello\n127.0.0.3:%d is a loopback address, which policy \"web\" does not open\n", port); string(out) != want {
		t.Errorf("output %q, want %q", out, want)
	}
	if len(notices) != 1 || !strings.Contains(notices[0], fmt.Sprintf("127.0.0.3:%d", port)) {
		t.Errorf("notices %q, want the refusal of 127.0.0.3", notices)
	}

	for _, tc := range []struct {
		scopes  []string
		network string
		code    string
	}{
		{allScopes, "web", wire.CodeForbidden},
		{append(allScopes, ScopeNetworkAny), "nope", wire.CodeBadRequest},
		{append(allScopes, ScopeNetworkAny), strings.Repeat("x", wire.MaxNetworkBytes+1), wire.CodeBadRequest},
		{append(allScopes, ScopeNetworkHost), "host", wire.CodeForbidden},
	} {
		c := e.dial(t, e.token(t, "acme", tc.scopes...))
		c.send(t, wire.Request{Type: wire.TypeStart, Req: "x", Command: "/bin/sh", Args: []string{"-c", "true"}, Network: tc.network})
		m, _ := c.expect(t, wire.MsgError)
		if m.Error != tc.code {
			t.Errorf("network %.20q with %v: %s %q, want %s", tc.network, tc.scopes, m.Error, m.Message, tc.code)
		}
		c.close()
	}
}
