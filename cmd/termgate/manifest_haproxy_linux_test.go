package main

import (
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

	"github.com/termgate/termgate/gateway"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// needHaproxy returns haproxy's path, or skips (fails under CI: .ci/deps
// installs it).
func needHaproxy(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"haproxy", "/usr/sbin/haproxy"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	sandboxtest.Unavailable(t, "haproxy is not installed (.ci/deps test installs it)")
	return ""
}

// manifestHaproxy prints the configuration for args, failing the test on
// a refusal.
func manifestHaproxy(t *testing.T, args ...string) string {
	t.Helper()
	code, conf, stderr := runCLI(t, "", append([]string{"manifest", "haproxy"}, args...)...)
	if code != 0 {
		t.Fatalf("manifest haproxy %q: status %d: %s", args, code, stderr)
	}
	return conf
}

// haproxyCheck runs haproxy -c on conf and returns its verdict.
func haproxyCheck(t *testing.T, haproxy, conf string) ([]byte, error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return exec.Command(haproxy, "-c", "-f", file).CombinedOutput()
}

// startHAProxy runs haproxy in the foreground (-db) with conf until the
// test ends, when it is stopped by its pid; it returns once listen
// accepts connections.
func startHAProxy(t *testing.T, conf, listen string) {
	t.Helper()
	haproxy := needHaproxy(t)
	file := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	startListening(t, "haproxy", exec.Command(haproxy, "-db", "-f", file), listen)
}

func TestManifestHaproxyPassesHaproxyCheck(t *testing.T) {
	t.Parallel()
	haproxy := needHaproxy(t)
	conf := manifestHaproxy(t, "--server", "termgate-0=10.0.0.1:8080", "--server", "termgate-1=10.0.0.2:8080",
		"--bind", "127.0.0.1:8099", "--check-interval", "500ms")
	for _, w := range []string{"mode http", "http-request del-header Termgate-Hop", "option forwardfor", "balance leastconn",
		"option httpchk GET /readyz", "http-check expect status 200", "timeout tunnel 1h",
		"use-server termgate-1 if { path_beg /v1/executions/termgate-1. } || { url_param(node) -m str termgate-1 }\n",
		"server termgate-0 10.0.0.1:8080 check inter 500ms fall 2 rise 2\n", "bind 127.0.0.1:8099\n"} {
		if !strings.Contains(conf, w) {
			t.Errorf("no %q in:\n%s", w, conf)
		}
	}
	if out, err := haproxyCheck(t, haproxy, conf); err != nil || strings.Contains(string(out), "WARNING") {
		t.Fatalf("haproxy -c: %v\n%s\n%s", err, out, conf)
	}
	// The check can fail: a rule naming a server the backend lacks.
	broken := strings.Replace(conf, "use-server termgate-1 if", "use-server termgate-9 if", 1)
	if out, err := haproxyCheck(t, haproxy, broken); err == nil {
		t.Fatalf("haproxy -c accepted a rule for a missing server:\n%s", out)
	}
}

func TestManifestHaproxyRefusesBadValues(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		nil, {"--server", "n0"}, {"--server", "N0=127.0.0.1:80"}, {"--server", "n0=127.0.0.1"}, {"--server", "n0=:80"},
		{"--server", "n0=127.0.0.1:80", "--server", "n0=127.0.0.2:80"}, {"--server", "n0=127.0.0.1:80 backup"},
		{"--server", "n0=127.0.0.1:70000"}, {"--server", "n0=127.0.0.1:80", "--bind", "80"},
		{"--server", "n0=127.0.0.1:80", "--bind", ":80 ssl"}, {"--server", "n0=127.0.0.1:80", "--check-interval", "10ms"},
		{"--server", "n0=127.0.0.1:80", "--check-interval", "2h"}, {"--server", "n0=127.0.0.1:80", "extra"}, {"--bogus"},
	} {
		code, stdout, stderr := runCLI(t, "", append([]string{"manifest", "haproxy"}, args...)...)
		if code != 2 || stdout != "" || stderr == "" {
			t.Errorf("manifest haproxy %q: status %d, stdout %q, stderr %q; want 2 and a message", args, code, stdout, stderr)
		}
	}
}

// nameServer serves on ip: /readyz answers 200, anything else its name
// and the Termgate-Hop header it got. It returns its HOST:PORT and a
// function that stops it, as a node going down.
func nameServer(t *testing.T, ip, name string) (string, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			return
		}
		fmt.Fprintf(w, "%s hop=%q", name, r.Header.Get("Termgate-Hop"))
	})}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	stop := func() {
		srv.Close()
		<-served
	}
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// getFrom returns the body of a GET of url with a forged hop header.
func getFrom(t *testing.T, c *http.Client, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Termgate-Hop", "v=1;from=n9;sig=forged")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, b)
}

// TestManifestHaproxyRoutesByNode: HAProxy run with the printed
// configuration sends an API path naming a node's execution, and a
// connect naming the node, to that node every time, never passes a
// client's hop header on, and sends what names a node it marked down to
// a live one.
func TestManifestHaproxyRoutesByNode(t *testing.T) {
	t.Parallel()
	a0, _ := nameServer(t, "127.0.0.1", "n0")
	a1, stop1 := nameServer(t, "127.0.0.2", "n1")
	listen := freeAddr(t)
	startHAProxy(t, manifestHaproxy(t, "--server", "n0="+a0, "--server", "n1="+a1, "--bind", listen, "--check-interval", "100ms"), listen)
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	base := "http://" + listen
	for range 6 {
		for path, want := range map[string]string{
			"/v1/executions/n1.abcdef~k1": "200 n1 hop=\"\"", "/v1/executions/n0.abcdef~k1/events": "200 n0 hop=\"\"",
			"/v1/connect?node=n1": "200 n1 hop=\"\"", "/v1/connect?x=1&node=n0": "200 n0 hop=\"\"",
		} {
			if got := getFrom(t, c, base+path); got != want {
				t.Fatalf("GET %s: %q, want %q", path, got, want)
			}
		}
	}
	stop1()
	// Two failed checks at 100ms mark n1 down; until then a request for n1
	// is redispatched after its failed connect.
	var got string
	moved := sandboxtest.Eventually(t, 20*time.Second, func() bool {
		got = getFrom(t, c, base+"/v1/executions/n1.abcdef~k1")
		return got == "200 n0 hop=\"\""
	})
	if !moved {
		t.Fatalf("a request for n1, down: %q, want n0's answer", got)
	}
}

// TestManifestHaproxyBoundsAFrozenNode: the timeouts are sized against
// --peer-timeout: a request (or a WebSocket's handshake) waits for a
// node's answer at most three peer timeouts and a second, enough for a
// live node to answer unavailable for a frozen owner itself; only a
// long poll waits longer, and a frozen node's check fails within one peer
// timeout. HAProxy's own timeout answers as termgate does: unavailable,
// with retry advice.
func TestManifestHaproxyBoundsAFrozenNode(t *testing.T) {
	t.Parallel()
	haproxy := needHaproxy(t)
	if haproxyDefaultPeerTimeout != gateway.DefaultPeerTimeout {
		t.Fatalf("manifest haproxy's default --peer-timeout %v, serve's %v", haproxyDefaultPeerTimeout, gateway.DefaultPeerTimeout)
	}
	for _, tc := range []struct {
		timeout       string
		server, check string
	}{{"", "7s", "2s"}, {"1s", "4s", "1s"}, {"500ms", "2500ms", "500ms"}} {
		args := []string{"--server", "n0=127.0.0.1:8080"}
		if tc.timeout != "" {
			args = append(args, "--peer-timeout", tc.timeout)
		}
		conf := manifestHaproxy(t, args...)
		for _, w := range []string{
			"timeout server " + tc.server + "\n", "timeout check " + tc.check + "\n",
			"http-request set-timeout server 75s if { path_end /events } { url_param(wait) -m found }\n",
			`http-error status 504 content-type "application/json; charset=utf-8" hdr Retry-After 1 string`,
		} {
			if !strings.Contains(conf, w) {
				t.Errorf("--peer-timeout %q: no %q in:\n%s", tc.timeout, w, conf)
			}
		}
		if out, err := haproxyCheck(t, haproxy, conf); err != nil || strings.Contains(string(out), "WARNING") {
			t.Fatalf("haproxy -c: %v\n%s\n%s", err, out, conf)
		}
	}
	for _, bad := range []string{"0s", "50ms", "2m"} {
		if code, _, stderr := runCLI(t, "", "manifest", "haproxy", "--server", "n0=127.0.0.1:80", "--peer-timeout", bad); code != 2 || stderr == "" {
			t.Errorf("--peer-timeout %s: status %d, stderr %q; want 2 and a message", bad, code, stderr)
		}
	}
}
