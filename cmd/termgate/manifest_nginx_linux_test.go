package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestManifestNginxProxiesASession: the printed configuration passes
// nginx -t, and termgate run through an nginx started with it, in front
// of a real gateway, runs a command: its WebSocket went through nginx;
// and with --trusted-proxy the gateway's log names the client nginx
// forwarded for (127.0.0.2), not nginx.
func TestManifestNginxProxiesASession(t *testing.T) {
	t.Parallel()
	nginx := needNginx(t)
	g := startGateway(t, "--command", "/bin/sh", "--command", "/bin/echo", "--default-command", "/bin/sh", "--trusted-proxy", "127.0.0.1")
	upstream, err := url.Parse(g.url)
	if err != nil {
		t.Fatal(err)
	}
	listen := freeAddr(t)
	code, conf, stderr := runCLI(t, "", "manifest", "nginx", "--server-name", "localhost", "--listen", listen, "--upstream", upstream.Host)
	if code != 0 {
		t.Fatalf("manifest nginx: status %d: %s", code, stderr)
	}
	dir := t.TempDir()
	main := writeNginxConf(t, dir, conf)
	if out, err := exec.Command(nginx, "-t", "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", main).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s\n%s", err, out, conf)
	}
	startNginx(t, nginx, dir, main, listen)

	tok := g.token(t, "acme", allScopes)
	code, out, stderr := runCLI(t, "", "run", "--url", "http://"+listen, "--token", tok, "--", "/bin/echo", "hi")
	if code != 0 || out != "hi\n" {
		t.Fatalf("run through nginx: status %d, stdout %q, stderr %q", code, out, stderr)
	}
	// nginx logs a WebSocket when it closes, maybe after run returned.
	var access []byte
	upgraded := sandboxtest.Eventually(t, 20*time.Second, func() bool {
		access, _ = os.ReadFile(filepath.Join(dir, "access.log"))
		return strings.Contains(string(access), "/v1/connect") && strings.Contains(string(access), " 101 ")
	})
	if !upgraded {
		t.Errorf("nginx logged no WebSocket upgrade:\n%s", access)
	}
	expectLogLine(t, g, "execution started", "127.0.0.1")
	requestFrom(t, "127.0.0.2", "http://"+listen+"/v1/executions")
	expectLogLine(t, g, "api request refused", "127.0.0.2")
}

// needNginx returns nginx's path, or skips (fails under CI: .ci/deps
// installs it).
func needNginx(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"nginx", "/usr/sbin/nginx"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	sandboxtest.Unavailable(t, "nginx is not installed (.ci/deps test installs it)")
	return ""
}

// freeAddr is a 127.0.0.1 address nothing listened on a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// writeNginxConf writes a main nginx.conf in dir that includes conf,
// with every path nginx writes (pid, logs, temp files) under dir.
func writeNginxConf(t *testing.T, dir, conf string) string {
	t.Helper()
	site := filepath.Join(dir, "termgate.conf")
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // the workers reach the temp paths under dir (0700)
	}
	var temps strings.Builder
	for _, kind := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&temps, "    %s_temp_path %s;\n", kind, filepath.Join(dir, kind))
	}
	main := fmt.Sprintf(`%s
daemon off;
worker_processes 1;
pid %s;
error_log %s info;
events { worker_connections 64; }
http {
    access_log %s;
%s    include %s;
}
`, user, filepath.Join(dir, "nginx.pid"), filepath.Join(dir, "error.log"), filepath.Join(dir, "access.log"), temps.String(), site)
	file := filepath.Join(dir, "nginx.conf")
	for name, text := range map[string]string{site: conf, file: main} {
		if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return file
}

// startNginx runs nginx in the foreground until the test ends, when it
// is stopped by the pid its pid file holds.
func startNginx(t *testing.T, nginx, dir, main, listen string) {
	t.Helper()
	errlog := filepath.Join(dir, "error.log")
	cmd := exec.Command(nginx, "-p", dir, "-e", errlog, "-c", main)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { stopNginx(t, dir, cmd.Process.Pid, done) })
	up := sandboxtest.Eventually(t, 20*time.Second, func() bool {
		if len(done) > 0 {
			return true
		}
		c, err := net.Dial("tcp", listen)
		if err == nil {
			c.Close()
		}
		return err == nil && pidFromFile(dir) > 0
	})
	if !up || len(done) > 0 {
		logs, _ := os.ReadFile(errlog)
		t.Fatalf("nginx did not start on %s:\n%s", listen, logs)
	}
}

// pidFromFile is the pid in dir's nginx.pid, or 0.
func pidFromFile(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "nginx.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// stopNginx stops the nginx master pid (SIGQUIT: graceful, then SIGKILL)
// and waits for it; its workers exit with it.
func stopNginx(t *testing.T, dir string, started int, done <-chan error) {
	pid := pidFromFile(dir)
	if pid != started {
		t.Errorf("nginx.pid holds %d, nginx started as %d", pid, started)
		pid = started // the process this test started, never another
	}
	syscall.Kill(pid, syscall.SIGQUIT)
	select {
	case <-done:
		return
	case <-time.After(20 * time.Second):
	}
	syscall.Kill(pid, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Errorf("nginx %d did not exit", pid)
	}
}
