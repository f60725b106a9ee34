package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestManifestCaddyValidates: caddy validate accepts the printed
// Caddyfile with automatic HTTPS, with plain HTTP on a port and address,
// and with certificate files (which it loads).
func TestManifestCaddyValidates(t *testing.T) {
	t.Parallel()
	caddy := needCaddy(t)
	cert, key := writeCertificate(t, t.TempDir())
	for _, args := range [][]string{
		{},
		{"--server-name", "gw.example.com *.gw.example.com", "--upstream", "127.0.0.1:9000"},
		{"--server-name", "localhost", "--port", "8443", "--tls-cert", cert, "--tls-key", key},
		{"--server-name", "127.0.0.1", "--port", "8080", "--bind", "127.0.0.1", "--plain-http"},
	} {
		code, conf, stderr := runCLI(t, "", append([]string{"manifest", "caddy"}, args...)...)
		if code != 0 {
			t.Fatalf("manifest caddy %q: status %d: %s", args, code, stderr)
		}
		dir := t.TempDir()
		file := filepath.Join(dir, "Caddyfile")
		if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(caddy, "validate", "--config", file, "--adapter", "caddyfile")
		cmd.Env = caddyEnv(dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("caddy validate, manifest caddy %q: %v\n%s\n%s", args, err, out, conf)
		}
	}
}

func TestManifestCaddyHoldsTheFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want []string
		not  []string
	}{
		{nil, []string{"termgate.example.com {", "reverse_proxy 127.0.0.1:8080 {", "health_uri /readyz", "flush_interval -1", "automatic HTTPS"}, []string{"\ttls ", "http://", "bind"}},
		{[]string{"--server-name", "a.example b.example", "--port", "8443", "--tls-cert", "/etc/c.pem", "--tls-key", "/etc/k.pem", "--upstream", "127.0.0.1:9"},
			[]string{"a.example:8443, b.example:8443 {", "\ttls /etc/c.pem /etc/k.pem\n", "reverse_proxy 127.0.0.1:9 {"}, []string{"http://"}},
		{[]string{"--server-name", "127.0.0.1", "--port", "80", "--bind", "127.0.0.1", "--plain-http"},
			[]string{"http://127.0.0.1:80 {", "\tbind 127.0.0.1\n"}, []string{"\ttls "}},
	} {
		code, out, stderr := runCLI(t, "", append([]string{"manifest", "caddy"}, c.args...)...)
		if code != 0 {
			t.Fatalf("manifest caddy %q: status %d: %s", c.args, code, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("manifest caddy %q: no %q in:\n%s", c.args, w, out)
			}
		}
		for _, w := range c.not {
			if strings.Contains(out, w) {
				t.Errorf("manifest caddy %q: %q in:\n%s", c.args, w, out)
			}
		}
	}
}

func TestManifestCaddyRefusesBadValues(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--server-name", "a{b"}, {"--server-name", ""}, {"--upstream", "no-port"}, {"--upstream", "127.0.0.1:80 {"},
		{"--port", "70000"}, {"--bind", "localhost"}, {"--tls-cert", "/c.pem"}, {"--tls-cert", "c.pem", "--tls-key", "/k.pem"},
		{"--tls-cert", "/c d.pem", "--tls-key", "/k.pem"}, {"--tls-cert", "/c.pem", "--tls-key", "/k.pem", "--plain-http"},
		{"extra"}, {"--bogus"},
	} {
		code, stdout, stderr := runCLI(t, "", append([]string{"manifest", "caddy"}, args...)...)
		if code != 2 || stdout != "" || stderr == "" {
			t.Errorf("manifest caddy %q: status %d, stdout %q, stderr %q; want 2 and a message", args, code, stdout, stderr)
		}
	}
}

// TestManifestCaddyProxiesASession: termgate run through a caddy run
// with the printed Caddyfile, in front of a real gateway, runs a command;
// and with --trusted-proxy the gateway's log names the client Caddy
// forwarded for (127.0.0.2), not Caddy.
func TestManifestCaddyProxiesASession(t *testing.T) {
	t.Parallel()
	caddy := needCaddy(t)
	g := startGateway(t, "--command", "/bin/sh", "--command", "/bin/echo", "--default-command", "/bin/sh", "--trusted-proxy", "127.0.0.1")
	upstream, err := url.Parse(g.url)
	if err != nil {
		t.Fatal(err)
	}
	listen := freeAddr(t)
	_, port, _ := net.SplitHostPort(listen)
	code, conf, stderr := runCLI(t, "", "manifest", "caddy", "--server-name", "127.0.0.1", "--port", port, "--bind", "127.0.0.1", "--plain-http", "--upstream", upstream.Host)
	if code != 0 {
		t.Fatalf("manifest caddy: status %d: %s", code, stderr)
	}
	dir := t.TempDir()
	startCaddy(t, caddy, dir, conf, listen)

	tok := g.token(t, "acme", allScopes)
	code, out, stderr := runCLI(t, "", "run", "--url", "http://"+listen, "--token", tok, "--", "/bin/echo", "hi")
	if code != 0 || out != "hi\n" {
		t.Fatalf("run through caddy: status %d, stdout %q, stderr %q", code, out, stderr)
	}
	// The connection came through Caddy: its address is the forwarded
	// one, without the port of Caddy's connection.
	expectLogLine(t, g, "execution started", "127.0.0.1")
	requestFrom(t, "127.0.0.2", "http://"+listen+"/v1/executions")
	expectLogLine(t, g, "api request refused", "127.0.0.2")
}

// needCaddy returns caddy's path, or skips (fails under CI: .ci/deps
// installs it).
func needCaddy(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("caddy")
	if err != nil {
		sandboxtest.Unavailable(t, "caddy is not installed (.ci/deps test installs it)")
	}
	return path
}

// caddyEnv is the environment of a caddy whose every file (autosave,
// certificates, locks) is under dir.
func caddyEnv(dir string) []string {
	return append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+filepath.Join(dir, "config"), "XDG_DATA_HOME="+filepath.Join(dir, "data"))
}

// startCaddy runs caddy with site, imported from a main Caddyfile with
// the admin endpoint off, until the test ends, when it is stopped by its
// pid (SIGTERM, then SIGKILL).
func startCaddy(t *testing.T, caddy, dir, site, listen string) {
	t.Helper()
	main := filepath.Join(dir, "Caddyfile")
	for name, text := range map[string]string{
		filepath.Join(dir, "termgate.caddy"): site,
		main:                                 fmt.Sprintf("{\n\tadmin off\n\tstorage file_system %s\n}\n\nimport termgate.caddy\n", filepath.Join(dir, "storage")),
	} {
		if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(caddy, "run", "--config", main, "--adapter", "caddyfile")
	cmd.Dir, cmd.Env = dir, caddyEnv(dir)
	startListening(t, "caddy", cmd, listen)
}

// startListening starts cmd, a server this test runs in the foreground,
// stops it by pid when the test ends, and waits (at most 20 s) until it
// accepts connections on listen; its output shows when it does not.
func startListening(t *testing.T, name string, cmd *exec.Cmd, listen string) {
	t.Helper()
	var logs sandboxtest.SyncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { stopByPid(t, name, cmd.Process.Pid, done) })
	up := sandboxtest.Eventually(t, 20*time.Second, func() bool {
		if len(done) > 0 {
			return true
		}
		c, err := net.Dial("tcp", listen)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	if !up || len(done) > 0 {
		t.Fatalf("%s did not start on %s:\n%s", name, listen, logs.String())
	}
}

// stopByPid stops the process this test started, pid (SIGTERM, then
// SIGKILL), and waits for it.
func stopByPid(t *testing.T, name string, pid int, done <-chan error) {
	syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-done:
		return
	case <-time.After(20 * time.Second):
	}
	syscall.Kill(pid, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Errorf("%s %d did not exit", name, pid)
	}
}

// requestFrom sends a GET to rawURL from the local address ip (a
// loopback address other than the proxy's, so that the gateway's log can
// tell the client from the proxy), with a token the gateway refuses.
func requestFrom(t *testing.T, ip, rawURL string) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer not-a-token")
	req.Header.Set("X-Forwarded-For", "192.0.2.99") // the client's own: the proxy drops or precedes it
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s from %s: %v", rawURL, ip, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET %s from %s: status %d, want 401", rawURL, ip, resp.StatusCode)
	}
}

// expectLogLine waits for the gateway's log line msg and checks the
// client address it names.
func expectLogLine(t *testing.T, g gatewayUnderTest, msg, remote string) {
	t.Helper()
	var addrs []string
	found := sandboxtest.Eventually(t, 20*time.Second, func() bool {
		addrs = addrs[:0]
		for _, l := range strings.Split(g.logs.String(), "\n") {
			var line map[string]any
			if json.Unmarshal([]byte(l), &line) == nil && line["msg"] == msg {
				a, _ := line["remote_addr"].(string)
				if a == remote {
					return true
				}
				addrs = append(addrs, a)
			}
		}
		return false
	})
	if !found {
		t.Errorf("no %q line with remote_addr %q; lines with %q", msg, remote, addrs)
	}
}

// writeCertificate writes a self-signed certificate for localhost and its
// key into dir.
func writeCertificate(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	err = errors.Join(os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600),
		os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}
