package gateway

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/netpolicy"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
)

// newNetworkEnv is a gateway over the real sandbox with network policies
// "web" allowing 127.0.0.2:port and "web3" allowing 127.0.0.3:port.
func newNetworkEnv(t *testing.T, port int, tweak func(*Config)) *testEnv {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{}
	for name, ip := range map[string]string{"web": "127.0.0.2", "web3": "127.0.0.3"} {
		files[name] = filepath.Join(dir, name+".toml")
		if err := os.WriteFile(files[name], fmt.Appendf(nil, "allow = [\"%s:%d\"]\n", ip, port), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set, err := netpolicy.NewSet(files)
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

// readToExit reads c until the exit: the output and the network notices.
func readToExit(t *testing.T, c *client, onMsg func(wire.Message)) (string, []string) {
	t.Helper()
	var out []byte
	var notices []string
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for {
		f, err := c.read(ctx)
		switch {
		case err != nil:
			t.Fatalf("read: %v (output %q)", err, out)
		case f.out != nil:
			out = append(out, f.out.Data...)
		case f.msg.Type == wire.MsgExit:
			return string(out), notices
		case f.msg.Type == wire.MsgEvent && f.msg.Event == wire.EventNotice && f.msg.Reason == wire.NoticeNetwork:
			notices = append(notices, f.msg.Message)
		}
		if f.msg != nil && onMsg != nil {
			onMsg(*f.msg)
		}
	}
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
	port := sandboxtest.HelloServers(t, "127.0.0.2")
	e := newNetworkEnv(t, port, nil)
	if !slices.Contains(e.srv.hello().Features, wire.FeatureNetwork) {
		t.Errorf("hello features %v lack %s", e.srv.hello().Features, wire.FeatureNetwork)
	}
	c := e.dial(t, e.token(t, "acme", append(allScopes, ScopeNetworkPrefix+"web")...))
	defer c.close()
	script := fmt.Sprintf("curl -sS http://127.0.0.2:%d/; echo; curl -sS http://127.0.0.3:%d/", port, port)
	c.send(t, wire.Request{Type: wire.TypeStart, Req: "s", Command: "/bin/sh", Args: []string{"-c", script}, Network: "web", Attach: true})
	out, notices := readToExit(t, c, func(m wire.Message) {
		if m.Type == wire.MsgError {
			t.Fatalf("error %s: %s", m.Error, m.Message)
		}
	})
	if want := fmt.Sprintf("hello from 127.0.0.2\n127.0.0.3:%d is a loopback address, which policy \"web\" does not open\n", port); out != want {
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

// TestNetworkChangeOverWebSocket: a network request on a writable
// channel changes the execution's policy for its next connections, told
// to the channel as a notice; a read-only channel, a token without the
// policy's scope and the host's network are refused.
func TestNetworkChangeOverWebSocket(t *testing.T) {
	t.Parallel()
	_, err := exec.LookPath("curl")
	sandboxtest.Need(t, "curl", err)
	port := sandboxtest.HelloServers(t, "127.0.0.3")
	e := newNetworkEnv(t, port, nil)
	c := e.dial(t, e.token(t, "acme", append(allScopes, ScopeNetworkPrefix+"web")...))
	defer c.close()
	script := fmt.Sprintf(`echo waiting; i=0; until curl -fsS http://127.0.0.3:%d/ 2>/dev/null || [ $i -ge 600 ]; do sleep 0.05; i=$((i+1)); done`, port)
	c.send(t, wire.Request{Type: wire.TypeStart, Req: "s", ID: "chg", Command: "/bin/sh", Args: []string{"-c", script}, Network: "web", Attach: true})
	attached, _ := c.expect(t, wire.MsgAttached)
	ch := attached.Channel
	c.send(t, wire.Request{Type: wire.TypeNetwork, Req: "n1", Channel: ch, Network: "web3"})
	if m, _ := c.expect(t, wire.MsgError); m.Error != wire.CodeForbidden || m.Req != "n1" {
		t.Errorf("a change to web3 with net:web only: %s %q, want forbidden", m.Error, m.Message)
	}
	c.send(t, wire.Request{Type: wire.TypeNetwork, Req: "n2", Channel: ch, Network: "host"})
	if m, _ := c.expect(t, wire.MsgError); m.Error != wire.CodeBadRequest {
		t.Errorf("a change to host: %s %q, want bad_request", m.Error, m.Message)
	}
	viewer := e.dial(t, e.token(t, "acme", append(allScopes, ScopeNetworkAny)...))
	defer viewer.close()
	viewer.send(t, wire.Request{Type: wire.TypeAttach, Req: "v", ID: "chg", ReadOnly: true})
	va, _ := viewer.expect(t, wire.MsgAttached)
	viewer.send(t, wire.Request{Type: wire.TypeNetwork, Req: "n3", Channel: va.Channel, Network: "web3"})
	if m, _ := viewer.expect(t, wire.MsgError); m.Error != wire.CodeReadOnly {
		t.Errorf("a change on a read-only channel: %s %q, want read_only", m.Error, m.Message)
	}
	writer := e.dial(t, e.token(t, "acme", append(allScopes, ScopeNetworkAny)...))
	defer writer.close()
	writer.send(t, wire.Request{Type: wire.TypeAttach, Req: "w", ID: "chg"})
	wa, _ := writer.expect(t, wire.MsgAttached)
	writer.send(t, wire.Request{Type: wire.TypeNetwork, Req: "n4", Channel: wa.Channel, Network: "web3"})
	if m, _ := writer.expect(t, wire.MsgOK); m.Req != "n4" {
		t.Errorf("the change's answer: %+v", m)
	}
	out, notices := readToExit(t, c, nil)
	if !strings.HasSuffix(out, "hello from 127.0.0.3") {
		t.Errorf("output %q, want the hello of 127.0.0.3 once changed", out)
	}
	if len(notices) == 0 || !strings.Contains(notices[len(notices)-1], `now "web3" (was "web")`) {
		t.Errorf("notices %q, want the change last", notices)
	}
	if st, err := e.sup.Network("acme", "chg"); err != nil || st.Network != "web3" || st.Allowed != 1 {
		t.Errorf("network %+v %v, want web3 with one connection allowed", st, err)
	}
}
