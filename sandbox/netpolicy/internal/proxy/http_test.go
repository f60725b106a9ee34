package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// get fetches url with c and returns the status and body.
func get(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: body: %v", url, err)
	}
	return resp, string(body)
}

// TestGoClient: Go's http.Client through the proxy, plain HTTP to two
// hosts on one client connection and HTTPS through CONNECT.
func TestGoClient(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	c := f.client(t)
	for _, url := range []string{f.httpURL + "/hello", f.httpURL2 + "/hello", f.httpURL + "/hello?again=1"} {
		resp, body := get(t, c, url)
		if resp.StatusCode != http.StatusOK || body != "ok /hello" {
			t.Fatalf("GET %s: %d %q", url, resp.StatusCode, body)
		}
	}
	if n := f.accepted.Load(); n != 1 {
		t.Errorf("%d client connections for three plain requests, want 1 (keep-alive)", n)
	}
	resp, body := get(t, c, f.tlsURL+"/hello")
	if resp.StatusCode != http.StatusOK || body != "ok /hello" || resp.TLS == nil {
		t.Fatalf("GET %s: %d %q", f.tlsURL, resp.StatusCode, body)
	}
	c.Transport.(*http.Transport).CloseIdleConnections()
	recs := f.waitRecords(t, 4)
	want := map[Protocol]int{HTTPForward: 3, HTTPConnect: 1}
	made := f.dialer.returned()
	for _, r := range recs {
		want[r.Protocol]--
		if r.Up == 0 || r.Down == 0 || r.Refused != "" || r.Err != nil {
			t.Errorf("record %+v: want bytes both ways and no error", r)
		}
		if !slices.Contains(made, r.Target) {
			t.Errorf("record %+v: its Target is not a connection the Dialer returned (%d returned)", r, len(made))
		}
	}
	for p, n := range want {
		if n != 0 {
			t.Errorf("%s records off by %d: %+v", p, -n, recs)
		}
	}
}

// TestRefusedHTTP: a refused host gets 403 with the reason, on both
// plain HTTP and CONNECT, and a Record with the reason.
func TestRefusedHTTP(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	resp, body := get(t, f.client(t), "http://"+blockedHost+"/x")
	if resp.StatusCode != http.StatusForbidden || body != blockedWhy+"\n" {
		t.Errorf("plain: %d %q, want 403 %q", resp.StatusCode, body, blockedWhy)
	}
	c, resp := f.connect(t, blockedHost+":443")
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || string(b) != blockedWhy+"\n" {
		t.Errorf("CONNECT: %d %q, want 403 %q", resp.StatusCode, b, blockedWhy)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Errorf("after a 403 the connection read %d bytes, %v; want its end", n, err)
	}
	for _, r := range f.waitRecords(t, 2) {
		if r.Refused != blockedWhy || r.Host != blockedHost || r.Err != nil || r.Target != nil {
			t.Errorf("record %+v: want refused %q", r, blockedWhy)
		}
	}
}

// TestHTTPErrors: the statuses of requests the proxy cannot serve.
func TestHTTPErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(s *Server) { s.DialTimeout = 200 * time.Millisecond })
	closed := "127.0.0.2:" + closedPort(t)
	for _, tc := range []struct {
		name, request string
		status        int
		body          string
	}{
		{"connect refused", "CONNECT " + blockedHost + ":443 HTTP/1.1\r\n\r\n", 403, blockedWhy},
		{"connect without port", "CONNECT " + blockedHost + " HTTP/1.1\r\n\r\n", 400, "CONNECT needs host:port"},
		{"connect port 0", "CONNECT 127.0.0.2:0 HTTP/1.1\r\n\r\n", 400, "CONNECT needs host:port"},
		{"connect closed port", "CONNECT " + closed + " HTTP/1.1\r\n\r\n", 502, "connection refused"},
		{"connect unreachable", "CONNECT " + unreachHost + ":443 HTTP/1.1\r\n\r\n", 502, "host unreachable"},
		{"connect timeout", "CONNECT " + slowHost + ":443 HTTP/1.1\r\n\r\n", 504, "connect timed out"},
		{"origin form", "GET /x HTTP/1.1\r\nHost: 127.0.0.2\r\n\r\n", 400, "not a proxy request"},
		{"https absolute", "GET https://127.0.0.2/ HTTP/1.1\r\nHost: 127.0.0.2\r\n\r\n", 400, "not a proxy request"},
		{"garbage", "\x16\x03\x01 hello\r\n\r\n", 400, "malformed request"},
		{"plain refused", "GET http://" + blockedHost + "/ HTTP/1.1\r\nHost: " + blockedHost + "\r\n\r\n", 403, blockedWhy},
		{"plain refused with a body", "POST http://" + blockedHost + "/ HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", 100000), 403, blockedWhy},
		{"plain closed port", "GET http://" + closed + "/ HTTP/1.1\r\nHost: x\r\n\r\n", 502, "connection refused"},
		{"head too large", "GET http://127.0.0.2/ HTTP/1.1\r\nX-Big: " + strings.Repeat("b", MaxHeaderBytes) + "\r\n\r\n", 431, "request head larger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := f.dial(t)
			if _, err := io.WriteString(c, tc.request); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || !strings.HasPrefix(string(body), tc.body) || !resp.Close {
				t.Errorf("%d %q (close %v), want %d %q and close", resp.StatusCode, body, resp.Close, tc.status, tc.body)
			}
		})
	}
}

// TestForwardHeaders: a plain request reaches the target in origin
// form without hop-by-hop headers, and the response comes back without
// its own.
func TestForwardHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	c := f.dial(t)
	host := strings.TrimPrefix(f.httpURL, "http://")
	fmt.Fprintf(c, "GET %s/hello?q=1 HTTP/1.1\r\nHost: elsewhere\r\nConnection: keep-alive, X-Foo\r\nX-Foo: 1\r\n"+
		"Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\nKeep-Alive: timeout=5\r\nTe: trailers, deflate\r\nX-Keep: yes\r\n\r\n", f.httpURL)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if got := resp.Header.Get("X-Request-URI"); got != "/hello?q=1" {
		t.Errorf("the target saw %q, want the origin form /hello?q=1", got)
	}
	if got, want := resp.Header.Get("X-Seen-Headers"), "Te,X-Keep"; got != want {
		t.Errorf("the target saw headers %s, want %s", got, want)
	}
	if got := resp.Header.Get("X-Seen-Te"); got != "trailers" {
		t.Errorf("the target saw Te %q, want trailers", got)
	}
	// The absolute form's host wins over the Host header (RFC 9112, 3.2.2).
	if recs := f.dialer.askedFor(); len(recs) != 1 || recs[0] != host {
		t.Errorf("dialed %v, want [%s]", recs, host)
	}

	fmt.Fprintf(c, "GET %s/hop HTTP/1.1\r\nHost: x\r\n\r\n", f.httpURL)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	for _, name := range []string{"X-Bar", "Keep-Alive", "Connection"} {
		if v := resp.Header.Get(name); v != "" {
			t.Errorf("the client got %s: %s", name, v)
		}
	}
	if resp.Header.Get("X-Kept") != "1" {
		t.Errorf("X-Kept lost: %v", resp.Header)
	}
}

// TestForwardStreams: a response's parts reach the client as the
// target sends them, trailers pass, and a chunked upload is streamed.
func TestForwardStreams(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	c := f.client(t)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, f.httpURL+"/stream", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); line != "first\n" {
		t.Fatalf("first part: %q %v", line, err) // held back by the proxy if this hangs
	}
	close(f.release)
	if rest, err := io.ReadAll(br); string(rest) != "second\n" || err != nil {
		t.Fatalf("second part: %q %v", rest, err)
	}
	resp.Body.Close()

	resp, body := get(t, c, f.httpURL+"/trailer")
	if body != "body" || resp.Trailer.Get("X-Sum") != "42" {
		t.Errorf("trailer: %q %v", body, resp.Trailer)
	}

	pr, pw := io.Pipe()
	go func() {
		for range 64 {
			pw.Write(bytes.Repeat([]byte("u"), 1000))
		}
		pw.Close()
	}()
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodPost, f.httpURL+"/upload", pr)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != "64000" || resp.Header.Get("X-Chunked") != "true" {
		t.Errorf("chunked upload: the target read %q bytes (chunked: %s), want 64000 chunked", got, resp.Header.Get("X-Chunked"))
	}
}

// TestForwardUpgrade: a 101 turns a plain request into a tunnel.
func TestForwardUpgrade(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	c := f.dial(t)
	fmt.Fprintf(c, "GET %s/upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo-test\r\n\r\n", f.httpURL)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "echo-test" {
		t.Fatalf("%d %v, want 101 to echo-test", resp.StatusCode, resp.Header)
	}
	io.WriteString(c, "ping")
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo %q %v", got, err)
	}
}

// TestCurl: curl through the proxy as HTTP proxy (plain and CONNECT),
// as SOCKS5 proxy resolving names on the proxy's side and on its own,
// with an upload that expects 100-continue, and refused.
func TestCurl(t *testing.T) {
	t.Parallel()
	curl, err := exec.LookPath("curl")
	sandboxtest.Need(t, "curl", err)
	f := newFixture(t, nil)
	upload := filepath.Join(t.TempDir(), "upload")
	if err := os.WriteFile(upload, bytes.Repeat([]byte("x"), 3<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	httpProxy, socks := "http://"+f.proxy, f.proxy
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"http", []string{"--proxy", httpProxy, f.httpURL + "/hello"}, "ok /hello"},
		{"connect", []string{"--proxy", httpProxy, "--cacert", f.caFile, f.tlsURL + "/hello"}, "ok /hello"},
		{"socks5-hostname", []string{"--socks5-hostname", socks, "--cacert", f.caFile, f.tlsURL + "/hello"}, "ok /hello"},
		{"socks5", []string{"--socks5", socks, f.httpURL + "/hello"}, "ok /hello"},
		{"upload", []string{"--proxy", httpProxy, "-H", "Expect: 100-continue", "--data-binary", "@" + upload, f.httpURL + "/upload"}, "3145728"},
		{"refused", []string{"--proxy", httpProxy, "http://" + blockedHost + "/"}, blockedWhy + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"-sS", "--max-time", "60"}, tc.args...)
			cmd := exec.CommandContext(t.Context(), curl, args...)
			cmd.Env = cleanEnv()
			out, err := cmd.Output()
			if err != nil || string(out) != tc.want {
				t.Errorf("curl %s: %q %v, want %q", strings.Join(args, " "), out, err, tc.want)
			}
		})
	}
	t.Run("connect refused", func(t *testing.T) {
		t.Parallel()
		cmd := exec.CommandContext(t.Context(), curl, "-sS", "--max-time", "60", "--proxy", httpProxy, "https://"+blockedHost+"/")
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "403") {
			t.Errorf("curl through a refused CONNECT: %q %v, want a failure naming 403", out, err)
		}
	})
}

// TestPython: Python's urllib through HTTP_PROXY and HTTPS_PROXY.
func TestPython(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	sandboxtest.Need(t, "python3", err)
	f := newFixture(t, nil)
	const script = `
import ssl, sys, urllib.error, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=60).read().decode())
ctx = ssl.create_default_context(cafile=sys.argv[3])
print(urllib.request.urlopen(sys.argv[2], context=ctx, timeout=60).read().decode())
try:
    urllib.request.urlopen("http://` + blockedHost + `/", timeout=60)
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())
`
	cmd := exec.CommandContext(t.Context(), python, "-c", script, f.httpURL+"/hello", f.tlsURL+"/hello", f.caFile)
	proxy := "http://" + f.proxy
	cmd.Env = append(cleanEnv(), "HTTP_PROXY="+proxy, "HTTPS_PROXY="+proxy, "http_proxy="+proxy, "https_proxy="+proxy)
	out, err := cmd.CombinedOutput()
	want := "ok /hello\nok /hello\n403 " + blockedWhy + "\n"
	if err != nil || string(out) != want {
		t.Errorf("python: %q %v, want %q", out, err, want)
	}
}

// TestForwardTargetClosedIdle: a kept target connection the target
// closed while idle is not used again: the next request dials anew.
func TestForwardTargetClosedIdle(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() { // answers one request per connection, then closes it unannounced
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(safety))
			if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}
			c.Close()
		}
	})
	c := f.dial(t)
	br := bufio.NewReader(c)
	for i := range 2 {
		fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: x\r\n\r\n", l.Addr())
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != "ok" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if n := len(f.dialer.askedFor()); n != 2 {
		t.Errorf("%d dials, want 2", n)
	}
}
