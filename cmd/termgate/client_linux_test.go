package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/gatewaytest"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// gatewayUnderTest is a real `termgate serve` on 127.0.0.1.
type gatewayUnderTest struct {
	url, secretFile string
	logs            *sandboxtest.SyncBuffer // what serve wrote to stderr
	// stop stops serve and waits for it, at most 40 s; the test's end
	// calls it too.
	stop func()
}

// startGateway runs serve in-process until the test ends.
func startGateway(t testing.TB, extra ...string) gatewayUnderTest {
	t.Helper()
	needBwrap(t)
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o711)
	os.Chmod(dir, 0o711)
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("a-test-secret-of-more-than-32-bytes-0123456789"), 0o600)
	ctx, stop := context.WithCancel(context.Background())
	errs := new(sandboxtest.SyncBuffer)
	done := make(chan error, 1)
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--jwt-secret-file", secret,
		"--workspace-root", filepath.Join(dir, "ws"), "--timeout", "5m", "--cgroup-parent", sandboxtest.CgroupParent(t), "--state-dir", "none"}, extra...)
	go func() { done <- run(ctx, args, strings.NewReader(""), io.Discard, errs) }()
	stopped := sync.OnceFunc(func() {
		stop()
		select {
		case err := <-done:
			done <- err
		case <-time.After(40 * time.Second):
			t.Error("serve did not stop")
		}
	})
	t.Cleanup(stopped)
	addr := regexp.MustCompile(`"msg":"listening","addr":"(127\.0\.0\.1:\d+)"`)
	var m []string
	sandboxtest.Eventually(t, 20*time.Second, func() bool {
		m = addr.FindStringSubmatch(errs.String())
		return m != nil || len(done) > 0
	})
	if m == nil && len(done) > 0 {
		err := <-done
		done <- err // for the cleanup
		t.Fatalf("serve ended: %v: %s", err, errs.String())
	}
	if m == nil {
		t.Fatalf("serve did not start: %s", errs.String())
	}
	return gatewayUnderTest{url: "http://" + m[1], secretFile: secret, logs: errs, stop: stopped}
}

func (g gatewayUnderTest) token(t testing.TB, tenant, scope string) string {
	t.Helper()
	code, out, stderr := runCLI(t, "", "token", "--secret-file", g.secretFile, "--tenant", tenant, "--scope", scope)
	if code != 0 {
		t.Fatalf("token: %d %s", code, stderr)
	}
	return strings.TrimSpace(out)
}

const allScopes = "exec:create exec:attach exec:write"

func TestRunStreamsBothOutputsAndExitStatus(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	tok := g.token(t, "acme", allScopes)
	code, out, stderr := runCLI(t, "", "run", "--url", g.url, "--token", tok, "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 3")
	if code != 3 || out != "out\n" || stderr != "err\n" {
		t.Fatalf("status %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, _, _ = runCLI(t, "", "run", "--url", g.url, "--token", tok, "--", "/bin/sh", "-c", "kill -TERM $$")
	if code != 143 {
		t.Fatalf("signal death: status %d", code)
	}
}

func TestRunForwardsStdinAndEOF(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	tok := g.token(t, "acme", allScopes)
	code, out, stderr := runCLI(t, "line one\nline two\n", "run", "--url", g.url, "--token", tok, "--", "/bin/sh", "-c", "wc -l; cat")
	if code != 0 || strings.TrimSpace(out) != "2" {
		t.Fatalf("status %d, stdout %q, stderr %q", code, out, stderr)
	}
}

func TestRunRefusesBadInput(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	for _, args := range [][]string{
		{"run", "--url", g.url, "--token", "x", "--", "/bin/sh"},
		{"run", "--url", "ftp://nowhere", "--token", "x", "--", "/bin/sh"},
	} {
		code, _, stderr := runCLI(t, "", args...)
		if code == 0 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("%q: status %d, stderr %q (want one line)", args, code, stderr)
		}
	}
	if code, _, _ := runCLI(t, "", "run", "--url", g.url); code != 2 {
		t.Errorf("run without a command: status %d", code)
	}
}

// TestRunSurvivesDroppedConnections runs seq 1 300000 through a proxy that
// cuts the connection repeatedly: the local output must equal seq's.
func TestRunSurvivesDroppedConnections(t *testing.T) {
	t.Parallel()
	// At the default ring (1 MiB, half of seq's output): the gateway holds
	// what the CLI has not acknowledged, so no reconnect loses any.
	g := startGateway(t, "--command", "/bin/bash", "--command", "/bin/sh", "--command", "/usr/bin/seq")
	tok := g.token(t, "acme", allScopes)
	proxy := newDroppingProxy(t, strings.TrimPrefix(g.url, "http://"))
	code, out, stderr := runCLI(t, "", "run", "--id", "seq", "--url", "http://"+proxy.Addr(), "--token", tok, "--", "seq", "1", "300000")
	if code != 0 {
		t.Fatalf("status %d, stderr %q", code, stderr)
	}
	var want bytes.Buffer
	for i := 1; i <= 300000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if out != want.String() {
		// Whether the gateway holds it all tells the sandbox's side from
		// the connection's.
		_, kept, _ := runCLI(t, "", "logs", "--id", "seq", "--url", g.url, "--token", tok)
		t.Fatalf("output differs: %d bytes, want %d, %s; the gateway holds %d bytes, %s (stderr %q)",
			len(out), want.Len(), firstDifference(out, want.String()), len(kept), firstDifference(kept, want.String()), stderr)
	}
	if proxy.Cuts() < 2 {
		t.Fatalf("only %d cuts: resume was not exercised", proxy.Cuts())
	}
}

// TestRunIsLosslessAtTheDefaults: termgate run -- seq 1 3000000 prints
// seq's 22.9 MB exactly and exits 0, at the server's defaults, whether its
// stdout is fast or slow.
func TestRunIsLosslessAtTheDefaults(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "--command", "/bin/bash", "--command", "/usr/bin/seq")
	tok := g.token(t, "acme", allScopes)
	want := sha256.Sum256([]byte(seqText(3000000)))
	for _, slow := range []bool{false, true} {
		t.Run(fmt.Sprintf("slow=%v", slow), func(t *testing.T) {
			t.Parallel()
			out := &hashWriter{h: sha256.New()}
			if slow {
				out.pause = time.Millisecond // per write of up to 32 KiB: about 20 MB/s
			}
			var errb bytes.Buffer
			err := run(t.Context(), []string{"run", "--url", g.url, "--token", tok, "--", "seq", "1", "3000000"}, strings.NewReader(""), out, &errb)
			if code := exitCode(err, &errb); code != 0 || !bytes.Equal(out.h.Sum(nil), want[:]) {
				t.Fatalf("status %d, %d bytes, transcript differs: %v; stderr %q", code, out.n, !bytes.Equal(out.h.Sum(nil), want[:]), errb.String())
			}
		})
	}
}

// hashWriter hashes what is written to it, pausing after each write.
type hashWriter struct {
	h     hash.Hash
	n     int
	pause time.Duration
}

func (w *hashWriter) Write(p []byte) (int, error) {
	w.h.Write(p)
	w.n += len(p)
	time.Sleep(w.pause)
	return len(p), nil
}

func seqText(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

// firstDifference says where got first departs from want, for a failure
// message that tells lost bytes from reordered or repeated ones.
func firstDifference(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	return fmt.Sprintf("first difference at byte %d: got %q, want %q", i, got[i:min(i+24, len(got))], want[i:min(i+24, len(want))])
}

func TestAttachFromSecondCLIAndReadOnly(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	tok := g.token(t, "acme", allScopes)
	started := make(chan struct{})
	var first struct {
		code int
		out  string
	}
	go func() {
		defer close(started)
		first.code, first.out, _ = runCLI(t, "", "run", "--id", "shared", "--url", g.url, "--token", tok, "--", "/bin/sh", "-c", "echo hello; sleep 2; echo bye")
	}()
	g.waitListed(t, tok, "shared")
	viewer := g.token(t, "acme", "exec:attach")
	code, out, stderr := runCLI(t, "", "attach", "--id", "shared", "--read-only", "--url", g.url, "--token", viewer)
	if code != 0 || out != "hello\nbye\n" {
		t.Fatalf("second CLI: status %d, output %q, stderr %q", code, out, stderr)
	}
	<-started
	if first.code != 0 || first.out != "hello\nbye\n" {
		t.Fatalf("first CLI: %+v", first)
	}
	// A read-only token cannot type: the command reads one line, and the
	// owner sends its line only once the viewer's input was refused.
	ownerIn, hold := io.Pipe()
	defer hold.Close()
	owner := make(chan string, 1)
	go func() {
		var out bytes.Buffer
		run(t.Context(), []string{"run", "--id", "typed", "--url", g.url, "--token", tok, "--", "/bin/bash", "-c", "read -t 60 x; echo got=$x"}, ownerIn, &out, io.Discard)
		owner <- out.String()
	}()
	g.waitListed(t, tok, "typed")
	var viewerOut, viewerErr sandboxtest.SyncBuffer
	viewerDone := make(chan struct{})
	go func() {
		defer close(viewerDone)
		run(t.Context(), []string{"attach", "--id", "typed", "--url", g.url, "--token", viewer}, strings.NewReader("intruder\n"), &viewerOut, &viewerErr)
	}()
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool { return strings.Contains(viewerErr.String(), "exec:write") }) {
		t.Fatalf("the viewer's input was never refused; stderr %q", viewerErr.String())
	}
	io.WriteString(hold, "owner\n")
	<-viewerDone
	if got := <-owner; got != "got=owner\n" || viewerOut.String() != got {
		t.Fatalf("read-only attach: owner saw %q, viewer %q (stderr %q)", got, viewerOut.String(), viewerErr.String())
	}
}

// waitListed waits until `termgate ls` shows the execution id, which a CLI
// started in the background creates at some point.
func (g gatewayUnderTest) waitListed(t *testing.T, tok, id string) {
	t.Helper()
	var out string
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool {
		_, out, _ = runCLI(t, "", "ls", "--url", g.url, "--token", tok)
		return strings.Contains(out, id)
	}) {
		t.Fatalf("%s never listed: %q", id, out)
	}
}

// newDroppingProxy cuts WebSocket connections after 64 KiB to 576 KiB
// from the server; see newDroppingProxySized.
func newDroppingProxy(t *testing.T, target string) *gatewaytest.CuttingProxy {
	return newDroppingProxySized(t, target, 64<<10)
}

// newDroppingProxySized cuts WebSocket connections after minBudget to
// 9*minBudget bytes from the server; other connections (a page and its
// scripts) pass whole.
func newDroppingProxySized(t *testing.T, target string, minBudget int64) *gatewaytest.CuttingProxy {
	return gatewaytest.NewCuttingProxy(t, target, gatewaytest.ProxyConfig{MinBudget: minBudget, Spread: 8 * minBudget, Seed: 7, Path: "/v1/connect"})
}

func TestLsAndLogs(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	tok := g.token(t, "acme", allScopes)
	if code, _, stderr := runCLI(t, "", "run", "--id", "listed", "--url", g.url, "--token", tok, "--", "/bin/sh", "-c", "echo one; echo two >&2"); code != 0 {
		t.Fatalf("run: %d %s", code, stderr)
	}
	code, out, stderr := runCLI(t, "", "ls", "--url", g.url, "--token", tok)
	if code != 0 || !strings.Contains(out, "listed") || !strings.Contains(out, "exited") {
		t.Fatalf("ls: %d %q %q", code, out, stderr)
	}
	code, out, stderr = runCLI(t, "", "logs", "--id", "listed", "--url", g.url, "--token", tok)
	if code != 0 || out != "one\n" || stderr != "two\n" {
		t.Fatalf("logs: %d %q %q", code, out, stderr)
	}
	// --follow waits for output and returns when the execution ends.
	later := make(chan struct{})
	go func() {
		defer close(later)
		runCLI(t, "", "run", "--id", "later", "--url", g.url, "--token", tok, "--", "/bin/sh", "-c", "sleep 1; echo late")
	}()
	defer func() { <-later }()
	g.waitListed(t, tok, "later")
	start := time.Now()
	code, out, _ = runCLI(t, "", "logs", "--follow", "--id", "later", "--url", g.url, "--token", tok)
	if code != 0 || out != "late\n" || time.Since(start) > 10*time.Second {
		t.Fatalf("logs --follow: %d %q after %v", code, out, time.Since(start))
	}
	if code, _, stderr := runCLI(t, "", "logs", "--id", "nope", "--url", g.url, "--token", tok); code != 1 || !strings.Contains(stderr, "not_found") {
		t.Fatalf("logs of an unknown id: %d %q", code, stderr)
	}
}
