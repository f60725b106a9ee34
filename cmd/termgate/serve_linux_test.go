package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
	"golang.org/x/sys/unix"
)

// TestServeDevEndToEnd runs `termgate serve --dev` on 127.0.0.1, connects
// with the printed token, runs a command, then stops the server as
// SIGTERM would: it must exit cleanly.
func TestServeDevEndToEnd(t *testing.T) {
	needBwrap(t)
	state := t.TempDir()
	os.Chmod(filepath.Dir(state), 0o711)
	t.Setenv("XDG_STATE_HOME", state)
	parent := sandboxtest.CgroupParent(t)
	ctx, stop := context.WithCancel(t.Context())
	var out, errs sandboxtest.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--dev", "--listen", "127.0.0.1:0", "--cgroup-parent", parent, "--state-dir", "none"}, strings.NewReader(""), &out, &errs)
	}()

	url := regexp.MustCompile(`http://(127\.0\.0\.1:\d+)/#token=(\S+)`)
	var m []string
	if !sandboxtest.Eventually(t, 20*time.Second, func() bool { m = url.FindStringSubmatch(out.String()); return m != nil }) {
		stop()
		t.Fatalf("no URL printed; stdout %q, stderr %q", out.String(), errs.String())
	}
	// The README's next step: the printed exports point the client commands here.
	exports := regexp.MustCompile(`(?m)^  export TERMGATE_URL=(\S+)\n  export TERMGATE_TOKEN=(\S+)$`).FindStringSubmatch(out.String())
	if exports == nil || exports[1] != "http://"+m[1] || exports[2] != m[2] {
		stop()
		t.Fatalf("no export lines for this server and token; stdout %q", out.String())
	}
	t.Setenv("TERMGATE_URL", exports[1])
	t.Setenv("TERMGATE_TOKEN", exports[2])
	if code, ls, stderr := runCLI(t, "", "ls"); code != 0 || !strings.HasPrefix(ls, "ID") {
		t.Errorf("termgate ls with the exported values: status %d, %q, %q", code, ls, stderr)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + m[1] + path)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}
	dctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(dctx, "ws://"+m[1]+"/v1/connect", &websocket.DialOptions{
		Subprotocols: []string{wire.Subprotocol, wire.BearerPrefix + m[2]},
		HTTPHeader:   http.Header{"Origin": {"http://" + m[1]}},
	})
	if err != nil {
		stop()
		t.Fatalf("dial: %v", err)
	}
	req, _ := json.Marshal(wire.Request{Type: wire.TypeStart, Command: "/bin/sh", Args: []string{"-c", "echo from-the-sandbox; id -u"}, Attach: true})
	ws.Write(dctx, websocket.MessageText, req)
	var got []byte
	for {
		typ, b, err := ws.Read(dctx)
		if err != nil {
			t.Fatalf("read: %v (output %q)", err, got)
		}
		if typ == websocket.MessageBinary {
			o, _ := wire.DecodeOutput(b)
			got = append(got, o.Data...)
			continue
		}
		var msg wire.Message
		json.Unmarshal(b, &msg)
		if msg.Type == wire.MsgExit {
			break
		}
	}
	if string(got) != "from-the-sandbox\n1000\n" {
		t.Errorf("output %q", got)
	}
	// Reading while the server stops answers its close handshake at once.
	closed := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		_, _, err := ws.Read(cctx)
		closed <- err
	}()
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("serve did not stop")
	}
	if err := <-closed; websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Errorf("connection closed with %v, want 1001", err)
	}
}

func TestServeUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "--network", "bridge", "--dev"},
		{"serve", "--network-policy", "agents", "--dev"},
		{"serve", "--network-policy", "Agents=/x.toml", "--dev"},
		{"serve", "--network-policy", "none=/x.toml", "--dev"},
		{"serve", "--network-policy", "a=/x.toml", "--network-policy", "a=/y.toml", "--dev"},
		{"serve", "--network-policy", "a=/x.toml", "--network", "b", "--dev"},
		{"serve", "--network-dns", "127.0.0.53", "--dev"},
		{"serve", "--jwt-secret-file", "/x"},
		{"serve", "--workspace-root", "/x"},
		{"serve", "--tls-cert", "c", "--dev"},
		{"serve", "--max-channels", "0", "--dev"},
		{"serve", "extra"},
		{"serve", "--log-format", "xml", "--dev"},
		{"serve", "--state-dir", "relative/dir", "--dev"},
		{"serve", "--orphan-grace", "0s", "--dev"},
		{"serve", "--orphan-grace", "25h", "--dev"},
	} {
		code, _, stderr := runCLI(t, "", args...)
		if code != 2 || stderr == "" {
			t.Errorf("termgate %q: status %d, stderr %q", args, code, stderr)
		}
	}
}

// TestServeDefaultCeilings: serve starts every execution under memory,
// pids, file size and CPU weight ceilings unless told otherwise, in dev
// mode too, and a tenant runs at most 16 at once.
func TestServeDefaultCeilings(t *testing.T) {
	want := sandbox.Limits{Memory: 1 << 30, Pids: 512, FileSize: 1 << 30, CPUWeight: 100}
	for _, args := range [][]string{
		{"--dev"},
		{"--jwt-secret-file", "/x", "--workspace-root", "/y"},
	} {
		o, err := parseServe(args, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if o.policy.Limits != want {
			t.Errorf("%q: limits %+v, want %+v", args, o.policy.Limits, want)
		}
		if tenant := (sandbox.Limits{Memory: 4 << 30, Pids: 2048, CPUWeight: 100}); o.sandbox.TenantLimits != tenant {
			t.Errorf("%q: tenant limits %+v, want %+v", args, o.sandbox.TenantLimits, tenant)
		}
		if o.session.MaxRunningPerOwner != 16 || o.session.MaxRetainedPerOwner != session.DefaultMaxRetainedPerOwner {
			t.Errorf("%q: per tenant %d running, %d retained", args, o.session.MaxRunningPerOwner, o.session.MaxRetainedPerOwner)
		}
	}
	o, err := parseServe([]string{"--dev", "--memory", "0", "--pids", "0", "--file-size", "0", "--cpu-weight", "0", "--max-retained-per-tenant", "7"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.policy.Limits != (sandbox.Limits{}) || o.session.MaxRetainedPerOwner != 7 {
		t.Errorf("ceilings set to 0: %+v, %d retained", o.policy.Limits, o.session.MaxRetainedPerOwner)
	}
	for _, bad := range []string{"-1", "10001", "x"} {
		if _, err := parseServe([]string{"--dev", "--cpu-weight", bad}, io.Discard); err == nil {
			t.Errorf("--cpu-weight %s accepted", bad)
		}
	}
	for _, bad := range []string{"0", "100001", "x"} {
		if _, err := parseServe([]string{"--dev", "--scrollback", bad}, io.Discard); err == nil {
			t.Errorf("--scrollback %s accepted", bad)
		}
	}
}

// TestServeConfigLogShowsCeilings: the startup log states each ceiling
// in units people read, defaults as what applies.
func TestServeConfigLogShowsCeilings(t *testing.T) {
	o, err := parseServe([]string{"--dev"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	o.logConfig(slog.New(slog.NewJSONHandler(&buf, nil)))
	for _, w := range []string{`"memory":"1G"`, `"pids":512`, `"file_size":"1G"`, `"cpu_weight":100`, `"max_running_per_tenant":16`, `"max_retained_per_tenant":128`, `"tmp_size":"64M"`, `"retention":"15m"`, `"timeout":"2m"`, `"max_timeout":"24h"`, `"hold":"5m"`, `"flow":"hold"`, `"commands":["/bin/bash","/bin/sh"]`, `"ring_bytes":"1M"`} {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("config log lacks %s: %s", w, buf.String())
		}
	}
}

// TestServeRefusesUnenforceableCeilings: a ceiling the host cannot apply
// stops serve at startup, naming the flag that turns it off.
func TestServeRefusesUnenforceableCeilings(t *testing.T) {
	t.Parallel()
	all := map[string]bool{"memory": true, "pids": true, "cpu_weight": true}
	lim := sandbox.Limits{Memory: 1 << 30, Pids: 512, CPUWeight: 100, FileSize: 1 << 30}
	tests := []struct {
		name     string
		lim      sandbox.Limits
		missing  string
		wantFlag string
	}{
		{"memory", lim, "memory", "--memory 0"},
		{"pids", lim, "pids", "--pids 0"},
		{"cpu weight", lim, "cpu_weight", "--cpu-weight 0"},
		{"memory off", sandbox.Limits{Pids: 512}, "memory", ""},
		{"all there", lim, "", ""},
		{"tenant memory", sandbox.Limits{}, "memory", "--tenant-memory 0"},
		{"tenant pids", sandbox.Limits{}, "pids", "--tenant-pids 0"},
		{"tenant cpu weight", sandbox.Limits{}, "cpu_weight", "--tenant-cpu-weight 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ceilings := maps.Clone(all)
			if tt.missing != "" {
				ceilings[tt.missing] = false
			}
			tenant := sandbox.Limits{}
			if strings.HasPrefix(tt.name, "tenant") {
				tenant = defaultTenantLimits
			}
			err := checkCeilings(tt.lim, tenant, ceilings, ceilings)
			if tt.wantFlag == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantFlag) {
				t.Fatalf("error %v, want it to name %q", err, tt.wantFlag)
			}
		})
	}
}

func TestServePublicKeysNeedAudience(t *testing.T) {
	t.Parallel()
	code, _, stderr := runCLI(t, "", "serve", "--jwt-public-key", "/x.pem", "--workspace-root", "/y")
	if code != 2 || !strings.Contains(stderr, "--jwt-audience") {
		t.Fatalf("status %d, stderr %q", code, stderr)
	}
}

// TestServeClosesIdleConnections: a kept-alive connection that sends
// nothing more is closed after --idle-timeout, and one that never sends
// its headers after --read-header-timeout.
func TestServeClosesIdleConnections(t *testing.T) {
	t.Parallel()
	o, err := parseServe([]string{"--dev", "--idle-timeout", "300ms", "--read-header-timeout", "300ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := o.limitListener(raw, slog.New(slog.DiscardHandler))
	if err != nil {
		raw.Close()
		t.Fatal(err)
	}
	hs := o.httpServer(t.Context(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) }), slog.New(slog.DiscardHandler))
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })

	idle := dialServe(t, ln.Addr().String())
	fmt.Fprintf(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(idle)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("kept-alive idle connection: %v, want the server to close it", err)
	}
	silent := dialServe(t, ln.Addr().String())
	if _, err := silent.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("connection without headers: %v, want the server to close it", err)
	}
}

// dialServe connects to addr; reads give up after 30s, far beyond the
// timeouts under test, so a connection the server keeps fails the test.
func dialServe(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	return c
}

// TestServeCapsConnections: --max-conns-per-addr refuses the connection
// beyond it at once.
func TestServeCapsConnections(t *testing.T) {
	t.Parallel()
	o, err := parseServe([]string{"--dev", "--max-conns-per-addr", "1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := o.limitListener(raw, slog.New(slog.DiscardHandler))
	if err != nil {
		raw.Close()
		t.Fatal(err)
	}
	hs := o.httpServer(t.Context(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), slog.New(slog.DiscardHandler))
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	first := dialServe(t, ln.Addr().String())
	fmt.Fprintf(first, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, err := http.ReadResponse(bufio.NewReader(first), nil); err != nil {
		t.Fatalf("first connection: %v", err)
	}
	second := dialServe(t, ln.Addr().String())
	if _, err := second.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isConnReset(err) {
		t.Fatalf("second connection from one address: %v, want it closed at once", err)
	}
}

func isConnReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

func TestServeConnectionFlagsRefuseBadValues(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--dev", "--idle-timeout", "0s"},
		{"--dev", "--read-header-timeout", "-1s"},
		{"--dev", "--read-timeout", "0s"},
		{"--dev", "--max-conns", "0"},
		{"--dev", "--fd-headroom", "-1"},
		{"--dev", "--first-byte-timeout", "-1s"},
		{"--dev", "--max-preauth-conns", "0"},
		{"--dev", "--max-conns", "10", "--max-preauth-conns", "11"},
	} {
		if _, err := parseServe(args, io.Discard); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}

// TestServeOutlivesAConnectionFloodAtALowDescriptorLimit runs serve in a
// child limited to 160 descriptors and opens 300 connections that each
// send one request and then idle. The connections beyond the caps are
// closed at once, a WebSocket opened before can still start an execution
// (the descriptor headroom), and /healthz answers again once the idle
// timeout has closed the flood.
func TestServeOutlivesAConnectionFloodAtALowDescriptorLimit(t *testing.T) {
	if os.Getenv("TERMGATE_TEST_SERVE_CHILD") != "" {
		serveAtLowDescriptorLimit(t)
		return
	}
	t.Parallel()
	needBwrap(t)
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o711)
	os.Chmod(dir, 0o711)
	secret := []byte("a-test-secret-of-more-than-32-bytes-0123456789")
	os.WriteFile(filepath.Join(dir, "secret"), secret, 0o600)
	ctx, cancel := context.WithTimeout(t.Context(), 180*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestServeOutlivesAConnectionFloodAtALowDescriptorLimit$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TERMGATE_TEST_SERVE_CHILD="+dir, "TERMGATE_CGROUP_PARENT="+sandboxtest.CgroupParent(t))
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 40 * time.Second
	var logs sandboxtest.SyncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Cancel()
		if err := cmd.Wait(); err != nil {
			t.Errorf("serve: %v", err)
		}
		if t.Failed() {
			t.Logf("serve's log:\n%s", logs.String())
		}
	}()
	addr := waitListening(t, &logs)

	tok, err := auth.MintHS256(secret, auth.Claims{Subject: "u", Tenant: "acme", ExpiresAt: time.Now().Add(time.Hour),
		Scopes: map[string]bool{auth.ScopeCreate: true, auth.ScopeAttach: true}}, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/v1/connect", &websocket.DialOptions{
		Subprotocols: []string{wire.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}},
	})
	if err != nil {
		t.Fatalf("dial before the flood: %v", err)
	}
	defer ws.CloseNow()

	refused := flood(t, addr, 300)
	if refused == 0 {
		t.Error("300 connections to a server with 160 descriptors and none refused")
	}
	req, _ := json.Marshal(wire.Request{Type: wire.TypeStart, Command: "/bin/sh", Args: []string{"-c", "echo ran"}, Attach: true})
	ws.Write(ctx, websocket.MessageText, req)
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("start during the flood: %v", err)
		}
		var m wire.Message
		json.Unmarshal(b, &m)
		if m.Type == wire.MsgError {
			t.Fatalf("start during the flood: %s: %s", m.Error, m.Message)
		}
		if m.Type == wire.MsgExit {
			if m.Code == nil || *m.Code != 0 {
				t.Fatalf("start during the flood: %+v", m)
			}
			break
		}
	}
	client := &http.Client{Timeout: 5 * time.Second}
	healthy := func() bool {
		var resp *http.Response
		if resp, err = client.Get("http://" + addr + "/healthz"); err != nil {
			return false
		}
		resp.Body.Close()
		err = fmt.Errorf("status %s", resp.Status)
		return resp.StatusCode == http.StatusOK
	}
	if !sandboxtest.Eventually(t, time.Minute, healthy) {
		t.Fatalf("/healthz after the flood went idle: %v", err)
	}
}

// serveAtLowDescriptorLimit is the child: serve at RLIMIT_NOFILE 160
// until SIGTERM.
func serveAtLowDescriptorLimit(t *testing.T) {
	dir := os.Getenv("TERMGATE_TEST_SERVE_CHILD")
	lim := unix.Rlimit{Cur: 160, Max: 160}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	err := run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--jwt-secret-file", filepath.Join(dir, "secret"),
		"--workspace-root", filepath.Join(dir, "ws"), "--idle-timeout", "2s", "--state-dir", "none"}, strings.NewReader(""), os.Stdout, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
}

func waitListening(t *testing.T, logs *sandboxtest.SyncBuffer) string {
	t.Helper()
	addr := regexp.MustCompile(`"msg":"listening","addr":"(127\.0\.0\.1:\d+)"`)
	var m []string
	if !sandboxtest.Eventually(t, 60*time.Second, func() bool { m = addr.FindStringSubmatch(logs.String()); return m != nil }) {
		t.Fatalf("serve did not start: %s", logs.String())
	}
	return m[1]
}

// flood opens n connections that send one request each and stay open.
// Each must be answered or closed (refused) within 20s: a connection
// left waiting means the server hung.
func flood(t *testing.T, addr string, n int) (refused int) {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("flood dial: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		conns = append(conns, c)
	}
	deadline := time.Now().Add(20 * time.Second)
	hung := 0
	for _, c := range conns {
		c.SetReadDeadline(deadline)
		_, err := http.ReadResponse(bufio.NewReader(c), nil)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			hung++
		case err != nil:
			refused++
		}
	}
	if hung > 0 {
		t.Errorf("%d of %d connections neither answered nor refused within 20s", hung, n)
	}
	return refused
}

// TestServeNewFlagsHaveEnvironmentEquivalents: each bound can be set
// from TERMGATE_* as well, and a flag wins over it.
func TestServeNewFlagsHaveEnvironmentEquivalents(t *testing.T) {
	for k, v := range map[string]string{
		"TERMGATE_CPU_WEIGHT": "0", "TERMGATE_MAX_RETAINED_PER_TENANT": "9", "TERMGATE_IDLE_TIMEOUT": "5s",
		"TERMGATE_READ_TIMEOUT": "7s", "TERMGATE_MAX_CONNS": "11", "TERMGATE_MAX_CONNS_PER_ADDR": "3", "TERMGATE_FD_HEADROOM": "0",
		"TERMGATE_MAX_PREAUTH_CONNS": "5", "TERMGATE_FIRST_BYTE_TIMEOUT": "2s",
	} {
		t.Setenv(k, v)
	}
	o, err := parseServe([]string{"--dev", "--max-conns", "12"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.policy.Limits.CPUWeight != 0 || o.session.MaxRetainedPerOwner != 9 || o.idleTimeout != 5*time.Second ||
		o.server.RequestReadTimeout != 7*time.Second || o.listener.MaxConns != 12 || o.listener.MaxConnsPerAddr != 3 || o.fdHeadroom != 0 ||
		o.listener.MaxPreAuthConns != 5 || o.firstByteTimeout != 2*time.Second {
		t.Fatalf("from the environment: %+v %+v %v %v %+v %d", o.policy.Limits, o.session, o.idleTimeout, o.server.RequestReadTimeout, o.listener, o.fdHeadroom)
	}
}

// TestServeBoundsTerminals: sandboxes open a few terminals of their own
// by default, and a configuration whose running executions could together
// take the kernel's whole pool is refused.
func TestServeBoundsTerminals(t *testing.T) {
	o, err := parseServe([]string{"--dev"}, io.Discard)
	if err != nil || o.policy.PTYs != DefaultPTYs {
		t.Fatalf("default ptys: %v, %v", o, err)
	}
	if o, err := parseServe([]string{"--dev", "--ptys", "0"}, io.Discard); err != nil || o.policy.PTYs != 0 {
		t.Errorf("--ptys 0: %v", err)
	}
	for _, bad := range []string{"-1", "1025", "x"} {
		if _, err := parseServe([]string{"--dev", "--ptys", bad}, io.Discard); err == nil {
			t.Errorf("--ptys %s accepted", bad)
		}
	}
	pool, err := sandbox.TerminalPool()
	if err != nil {
		t.Skipf("no terminal pool to check against: %v", err)
	}
	if err := checkTerminalPool(DefaultPTYs, session.DefaultMaxRunning); err != nil {
		t.Errorf("the defaults do not fit the pool of %d: %v", pool, err)
	}
	if err := checkTerminalPool(0, 1<<20); err != nil {
		t.Errorf("no terminals: %v", err)
	}
	err = checkTerminalPool(pool/8+1, 8)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("--ptys %d", pool/8+1)) {
		t.Errorf("a configuration above the pool of %d: %v", pool, err)
	}
}

// TestServeRefusesPrivateProcWithoutLandlock: a private procfs is served
// only where the probe found the sandbox's pid 1 out of reach.
func TestServeRefusesPrivateProcWithoutLandlock(t *testing.T) {
	t.Parallel()
	with := sandbox.Report{Checks: map[string]bool{"init_out_of_reach": true}}
	without := sandbox.Report{Checks: map[string]bool{}}
	if err := checkProc("private", with); err != nil {
		t.Errorf("with Landlock: %v", err)
	}
	if err := checkProc("none", without); err != nil {
		t.Errorf("no procfs: %v", err)
	}
	if err := checkProc("private", without); err == nil || !strings.Contains(err.Error(), "--proc none") {
		t.Errorf("a private procfs without Landlock: %v", err)
	}
}

// TestLogFormats: both formats write one line per record, with control
// characters in a value escaped, never a line a value could forge.
func TestLogFormats(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"json", "text"} {
		var b bytes.Buffer
		log, err := newLevelLogger(&b, "info", format)
		if err != nil {
			t.Fatal(err)
		}
		log.Info("execution started", "command", "evil\n{\"msg\":\"forged\"}\x1b[2J")
		out := b.String()
		if strings.Count(out, "\n") != 1 || strings.Contains(out, "\x1b") {
			t.Errorf("%s: %q: want one line, the escape and newline escaped", format, out)
		}
	}
	if _, err := newLevelLogger(io.Discard, "info", "xml"); err == nil {
		t.Error("format xml accepted")
	}
}

// TestServeResizeRate: --resizes-per-second defaults to the gateway's
// default, comes from TERMGATE_RESIZES_PER_SECOND too (the flag wins), and
// must be positive.
func TestServeResizeRate(t *testing.T) {
	if o, err := parseServe([]string{"--dev"}, io.Discard); err != nil || o.server.ResizesPerSecond != gateway.DefaultResizesPerSecond {
		t.Fatalf("default: %v, %v", o.server.ResizesPerSecond, err)
	}
	t.Setenv("TERMGATE_RESIZES_PER_SECOND", "7")
	if o, err := parseServe([]string{"--dev"}, io.Discard); err != nil || o.server.ResizesPerSecond != 7 {
		t.Fatalf("from the environment: %v, %v", o.server.ResizesPerSecond, err)
	}
	if o, err := parseServe([]string{"--dev", "--resizes-per-second", "9"}, io.Discard); err != nil || o.server.ResizesPerSecond != 9 {
		t.Fatalf("flag over the environment: %v, %v", o.server.ResizesPerSecond, err)
	}
	for _, bad := range []string{"0", "-1", "x"} {
		if _, err := parseServe([]string{"--dev", "--resizes-per-second", bad}, io.Discard); err == nil {
			t.Errorf("--resizes-per-second %s accepted", bad)
		}
	}
}

// TestServeScreenBounds: the snapshot, screen memory and queued bytes
// bounds take their defaults, their flags, and refuse what they cannot
// mean: a snapshot larger than a message, or below 64K; no screen memory.
func TestServeScreenBounds(t *testing.T) {
	o, err := parseServe([]string{"--dev"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var cfg session.Config
	o.screens.wire(&cfg, o.server.MaxMessageBytes)
	if cfg.MaxSnapshotBytes != gateway.DefaultMaxMessageBytes-wire.SnapshotOverhead ||
		cfg.MaxScreenMemory != session.DefaultMaxScreenMemory || cfg.MaxScreenMemoryPerOwner != session.DefaultMaxScreenMemoryPerOwner {
		t.Fatalf("defaults: %+v", cfg)
	}
	o, err = parseServe([]string{"--dev", "--max-message-bytes", "2M", "--max-snapshot-bytes", "128K", "--screen-memory", "64M",
		"--screen-memory-per-tenant", "8M", "--max-queued-bytes", "1M", "--max-queued-bytes-per-subject", "3M"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.screens.wire(&cfg, o.server.MaxMessageBytes)
	if cfg.MaxSnapshotBytes != 128<<10-wire.SnapshotOverhead || cfg.MaxScreenMemory != 64<<20 || cfg.MaxScreenMemoryPerOwner != 8<<20 ||
		o.server.MaxQueuedBytes != 1<<20 || o.server.MaxQueuedBytesPerSubject != 3<<20 {
		t.Fatalf("flags: %+v, queued %d and %d", cfg, o.server.MaxQueuedBytes, o.server.MaxQueuedBytesPerSubject)
	}
	for _, bad := range [][]string{
		{"--max-snapshot-bytes", "32K"},
		{"--max-snapshot-bytes", "2M"}, // over --max-message-bytes (1M)
		{"--screen-memory", "0"},
		{"--screen-memory-per-tenant", "0"},
	} {
		if _, err := parseServe(append([]string{"--dev"}, bad...), io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// TestServePidsFallbackIsPerExecution: --pids-fallback makes an
// execution's pids ceiling enforceable without the controller, never a
// tenant's, which needs the controller itself.
func TestServePidsFallbackIsPerExecution(t *testing.T) {
	t.Parallel()
	ceilings := map[string]bool{"memory": true, "pids": true, "cpu_weight": true}
	tenant := map[string]bool{"memory": true, "pids": false, "cpu_weight": true}
	if err := checkCeilings(sandbox.Limits{Pids: 512}, sandbox.Limits{}, ceilings, tenant); err != nil {
		t.Errorf("--pids with the fallback: %v", err)
	}
	err := checkCeilings(sandbox.Limits{Pids: 512}, sandbox.Limits{Pids: 2048}, ceilings, tenant)
	if err == nil || !strings.Contains(err.Error(), "--tenant-pids 0") || strings.Contains(err.Error(), "--pids 0") {
		t.Errorf("--tenant-pids without the controller: %v, want it alone refused", err)
	}
}
