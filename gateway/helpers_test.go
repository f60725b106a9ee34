package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

func TestMain(m *testing.M) {
	runKeeperRole()
	runAttachRole()
	sandboxtest.Main(m, sandboxtest.After(sharedLauncher.Release), sandboxtest.Ignore(sandboxtest.Forker))
}

// gatewayCgroups is the shared launcher's cgroup parent, not a real
// server's default.
var gatewayCgroups = sandboxtest.SharedCgroupParent("gateway")

// sharedLauncher is the real sandbox the tests' gateways share.
var sharedLauncher = sandboxtest.Shared[*sandbox.Launcher]{
	What: "sandbox (install bubblewrap)",
	New: func() (*sandbox.Launcher, error) {
		return sandbox.NewLauncher(sandbox.Config{KillGrace: 500 * time.Millisecond, CgroupParent: gatewayCgroups})
	},
	Close: func(l *sandbox.Launcher) {
		l.Close()
		sandboxtest.RemoveCgroupParent(gatewayCgroups)
	},
}

func needLauncher(t testing.TB) *sandbox.Launcher {
	t.Helper()
	return sharedLauncher.Get(t)
}

// testEnv is a real gateway on 127.0.0.1, over the real sandbox (newEnv)
// or the fake launcher (newFakeEnv).
type testEnv struct {
	srv    *Server
	http   *httptest.Server
	authn  *auth.Authenticator
	secret []byte
	sup    *session.Supervisor
	fake   *sessiontest.Launcher // newFakeCluster's launcher; nil otherwise
}

// newEnv starts a gateway over the real sandbox; tweak adjusts its
// config before it starts.
func newEnv(t testing.TB, tweak func(*Config)) *testEnv {
	t.Helper()
	return newEnvOn(t, session.SandboxLauncher(needLauncher(t)), tweak)
}

// newFakeEnv starts a gateway over l, a fake launcher, for protocol
// tests that need no real process: they are fast and run anywhere.
func newFakeEnv(t testing.TB, l *sessiontest.Launcher, tweak func(*Config)) *testEnv {
	t.Helper()
	return newEnvOn(t, l, tweak)
}

func newEnvOn(t testing.TB, l session.Launcher, tweak func(*Config)) *testEnv {
	t.Helper()
	return newEnvSession(t, session.Config{Launcher: l}, tweak)
}

// newEnvSession starts a gateway over a supervisor configured as sc.
func newEnvSession(t testing.TB, sc session.Config, tweak func(*Config)) *testEnv {
	t.Helper()
	return newEnvListener(t, sc, nil, tweak)
}

// newEnvListener is newEnvSession serving on ln (nil: a new listener on
// 127.0.0.1).
func newEnvListener(t testing.TB, sc session.Config, ln net.Listener, tweak func(*Config)) *testEnv {
	t.Helper()
	dir := sandboxtest.Dir(t)
	secret := []byte("0123456789abcdef0123456789abcdef-test-secret")
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	// A short leeway: connections end soon after their token's exp.
	authn, err := auth.New(auth.Config{HS256SecretFile: secretFile, Leeway: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sup, err := session.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Supervisor: sup, Auth: authn, WorkspaceRoot: filepath.Join(dir, "ws")}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv.Handler())
	if ln != nil {
		ts.Listener.Close()
		ts.Listener = ln
	}
	ts.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// As serve does on a shutdown for good: the supervisor ends the
		// executions while the server sends their exits.
		shut := make(chan error, 1)
		go func() { shut <- srv.Shutdown(ctx) }()
		sup.Close(ctx)
		<-shut
		ts.Close()
	})
	// Every exchange of the HTTP API through the test's clients is checked
	// against openapi.json (openapi_test.go).
	ts.Client().Transport = newContract(t, ts.Client().Transport)
	return &testEnv{srv: srv, http: ts, authn: authn, secret: secret, sup: sup}
}

// client is an HTTP client of the gateway that checks what it sends and
// gets against openapi.json.
func (e *testEnv) client() *http.Client { return e.http.Client() }

var allScopes = []string{auth.ScopeCreate, auth.ScopeAttach, auth.ScopeWrite}

// token mints a token for tenant with scopes, valid for an hour.
func (e *testEnv) token(t testing.TB, tenant string, scopes ...string) string {
	t.Helper()
	sc := map[string]bool{}
	for _, s := range scopes {
		sc[s] = true
	}
	tok, err := e.authn.Mint(auth.Claims{Subject: "user-" + tenant, Tenant: tenant, Scopes: sc, IssuedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (e *testEnv) url() string { return "ws" + strings.TrimPrefix(e.http.URL, "http") + "/v1/connect" }

// dial connects with the token in the Authorization header.
func (e *testEnv) dial(t testing.TB, token string) *client {
	t.Helper()
	c, resp, err := e.dialRaw(token, nil)
	if err != nil {
		t.Fatalf("dial: %v (status %d)", err, status(resp))
	}
	return c
}

func (e *testEnv) dialRaw(token string, opts *websocket.DialOptions) (*client, *http.Response, error) {
	if opts == nil {
		opts = &websocket.DialOptions{Subprotocols: []string{wire.Subprotocol}, HTTPHeader: http.Header{}}
		if token != "" {
			opts.HTTPHeader.Set("Authorization", "Bearer "+token)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, e.url(), opts)
	if err != nil {
		return nil, resp, err
	}
	ws.SetReadLimit(4 << 20)
	return &client{ws: ws}, resp, nil
}

func status(r *http.Response) int {
	if r == nil {
		return 0
	}
	return r.StatusCode
}

// client is a minimal protocol client for tests.
type client struct {
	ws *websocket.Conn
}

func (c *client) send(t testing.TB, r wire.Request) {
	t.Helper()
	b, _ := json.Marshal(r)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatalf("send %s: %v", r.Type, err)
	}
}

func (c *client) sendInput(t testing.TB, channel uint32, offset uint64, data string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageBinary, wire.AppendInput(nil, channel, offset, []byte(data))); err != nil {
		t.Fatalf("send input: %v", err)
	}
}

// frame is one message from the server: a control message or output.
type frame struct {
	msg *wire.Message
	out *wire.Output
}

func (c *client) read(ctx context.Context) (frame, error) {
	typ, b, err := c.ws.Read(ctx)
	if err != nil {
		return frame{}, err
	}
	if typ == websocket.MessageBinary {
		o, err := wire.DecodeOutput(b)
		return frame{out: &o}, err
	}
	var m wire.Message
	if err := json.Unmarshal(b, &m); err != nil {
		return frame{}, err
	}
	return frame{msg: &m}, nil
}

// expect reads until a control message of type typ arrives (collecting
// output on the way) and returns it.
func (c *client) expect(t testing.TB, typ string) (wire.Message, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []byte
	for {
		f, err := c.read(ctx)
		if err != nil {
			t.Fatalf("waiting for %s: %v (output so far %q)", typ, err, out)
		}
		if f.out != nil {
			out = append(out, f.out.Data...)
			continue
		}
		if f.msg.Type == typ {
			return *f.msg, out
		}
		if f.msg.Type == wire.MsgError && typ != wire.MsgError {
			t.Fatalf("waiting for %s: error %s: %s", typ, f.msg.Error, f.msg.Message)
		}
	}
}

func (c *client) close() { c.ws.Close(websocket.StatusNormalClosure, "") }

// closeCode returns the close status of err, or -1.
func closeCode(err error) websocket.StatusCode {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return -1
}
