package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

func TestMain(m *testing.M) { sandboxtest.Main(m) }

// safety is a test's net for one blocking step; it is never a measure.
const safety = 30 * time.Second

// The names the test Dialer knows besides the addresses it connects to.
const (
	blockedHost = "blocked.test"     // refused with blockedReason
	slowHost    = "slow.test"        // waits for the Dial's context
	unreachHost = "unreachable.test" // fails as unreachable
	tlsName     = "example.com"      // the TLS upstream, named in httptest's certificate
	blockedWhy  = "blocked.test is not on the list of policy \"test\""
)

// testDialer connects to IPv4 loopback addresses only, and plays the
// policy for the names above.
type testDialer struct {
	names map[string]string // name → IPv4 loopback address
	mu    sync.Mutex
	asked []string   // host:port, in order
	made  []net.Conn // the connections returned, in order
}

func (d *testDialer) Dial(ctx context.Context, host string, port uint16) (net.Conn, error) {
	d.mu.Lock()
	d.asked = append(d.asked, net.JoinHostPort(host, strconv.Itoa(int(port))))
	d.mu.Unlock()
	switch host {
	case blockedHost:
		return nil, &Refused{Reason: blockedWhy}
	case slowHost:
		<-ctx.Done()
		return nil, ctx.Err()
	case unreachHost:
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}
	}
	if ip, ok := d.names[host]; ok {
		host = ip
	}
	if a, err := netip.ParseAddr(host); err != nil || !a.Is4() || !a.IsLoopback() {
		return nil, &Refused{Reason: "test: IPv4 loopback only"}
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(int(port))))
	if err == nil {
		d.mu.Lock()
		d.made = append(d.made, c)
		d.mu.Unlock()
	}
	return c, err
}

func (d *testDialer) returned() []net.Conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.made)
}

func (d *testDialer) askedFor() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.asked)
}

// fixture is a proxy on 127.0.0.1 with its upstreams: plain HTTP on
// 127.0.0.2 and 127.0.0.5, TLS on 127.0.0.3 (as example.com), and a
// raw TCP echo on 127.0.0.4.
type fixture struct {
	srv      *Server
	dialer   *testDialer
	proxy    string // host:port
	accepted atomic.Int64
	serveErr chan error

	httpURL, httpURL2 string // http://127.0.0.2:port, http://127.0.0.5:port
	tlsURL            string // https://example.com:port
	tlsPort           string
	caFile            string // the TLS upstream's certificate, PEM
	caPool            *x509.CertPool
	echo              string // host:port

	mu      sync.Mutex
	records []Record
	release chan struct{} // /stream's second part waits for it
}

// newFixture starts a fixture; adjust sets the Server's fields.
func newFixture(t *testing.T, adjust func(*Server)) *fixture {
	t.Helper()
	f := &fixture{dialer: &testDialer{names: map[string]string{}}, release: make(chan struct{})}
	up := upstreamHandler(f.release)
	f.httpURL = "http://" + startHTTP(t, "127.0.0.2", up, false).Listener.Addr().String()
	f.httpURL2 = "http://" + startHTTP(t, "127.0.0.5", up, false).Listener.Addr().String()
	ts := startHTTP(t, "127.0.0.3", up, true)
	_, f.tlsPort, _ = net.SplitHostPort(ts.Listener.Addr().String())
	f.tlsURL = "https://" + tlsName + ":" + f.tlsPort
	f.dialer.names[tlsName] = "127.0.0.3"
	f.caPool = x509.NewCertPool()
	f.caPool.AddCert(ts.Certificate())
	f.caFile = filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	if err := os.WriteFile(f.caFile, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	f.echo = startEcho(t, "127.0.0.4")

	f.srv = &Server{Dialer: f.dialer, Done: f.add}
	if adjust != nil {
		adjust(f.srv)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.proxy = l.Addr().String()
	f.serveErr = make(chan error, 1)
	go func() { f.serveErr <- f.srv.Serve(countingListener{l, &f.accepted}) }()
	t.Cleanup(func() {
		f.srv.Close()
		if err := <-f.serveErr; !errors.Is(err, ErrClosed) {
			t.Errorf("Serve returned %v, want ErrClosed", err)
		}
	})
	return f
}

func (f *fixture) add(r Record) {
	f.mu.Lock()
	f.records = append(f.records, r)
	f.mu.Unlock()
}

// recorded returns the Records so far.
func (f *fixture) recorded() []Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.records)
}

// waitRecords waits until n Records came, and returns them.
func (f *fixture) waitRecords(t *testing.T, n int) []Record {
	t.Helper()
	var got []Record
	if !sandboxtest.Eventually(t, safety, func() bool { got = f.recorded(); return len(got) >= n }) {
		t.Fatalf("%d records, want %d: %+v", len(got), n, got)
	}
	return got
}

// proxyURL is the proxy as an http:// URL.
func (f *fixture) proxyURL() *url.URL { return &url.URL{Scheme: "http", Host: f.proxy} }

// client is an http.Client through the proxy that trusts the TLS
// upstream.
func (f *fixture) client(t *testing.T) *http.Client {
	tr := &http.Transport{Proxy: http.ProxyURL(f.proxyURL()), TLSClientConfig: &tls.Config{RootCAs: f.caPool}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: safety}
}

// dial opens a raw connection to the proxy with the safety deadline.
func (f *fixture) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", f.proxy, safety)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(safety))
	return c
}

// connect opens a CONNECT tunnel to target and returns it with the
// proxy's response, whose body (if any) is read from the connection.
func (f *fixture) connect(t *testing.T, target string) (net.Conn, *http.Response) {
	t.Helper()
	c := f.dial(t)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	if resp.StatusCode == http.StatusOK && br.Buffered() > 0 {
		t.Fatalf("CONNECT %s: %d bytes after the response", target, br.Buffered())
	}
	return c, resp
}

// closedPort is a port on 127.0.0.2 that nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	return port
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// startHTTP starts an httptest server on ip.
func startHTTP(t *testing.T, ip string, h http.Handler, withTLS bool) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(h)
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	ts.Listener.Close()
	ts.Listener = l
	if withTLS {
		ts.StartTLS()
	} else {
		ts.Start()
	}
	t.Cleanup(ts.Close)
	return ts
}

// upstreamHandler serves the upstreams' paths:
//
//	/hello    "ok PATH"; X-Request-URI and X-Seen-Headers tell what came
//	/stream   "first\n", then "second\n" once release is closed
//	/trailer  a chunked body and the trailer X-Sum: 42
//	/upload   the length of the body read; X-Chunked says how it came
//	/hop      hop-by-hop headers in the response
//	/upgrade  a 101 to "echo-test", then an echo
func upstreamHandler(release <-chan struct{}) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-URI", r.RequestURI)
		names := make([]string, 0, len(r.Header))
		for k := range r.Header {
			names = append(names, k)
		}
		slices.Sort(names)
		w.Header().Set("X-Seen-Headers", strings.Join(names, ","))
		w.Header().Set("X-Seen-Te", r.Header.Get("Te"))
		fmt.Fprintf(w, "ok %s", r.URL.Path)
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "second\n")
	})
	mux.HandleFunc("/trailer", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, "body")
		w.(http.Flusher).Flush()
		w.Header().Set("X-Sum", "42")
	})
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Chunked", strconv.FormatBool(slices.Contains(r.TransferEncoding, "chunked")))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%d", n)
	})
	mux.HandleFunc("/hop", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "X-Bar")
		w.Header().Set("X-Bar", "1")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Kept", "1")
		io.WriteString(w, "hop")
	})
	mux.HandleFunc("/upgrade", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo-test" || !hasToken(r.Header["Connection"], "upgrade") {
			http.Error(w, "no upgrade", http.StatusBadRequest)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo-test\r\n\r\n")
		io.Copy(c, brw)
	})
	return mux
}

// startEcho starts a raw TCP server on ip that echoes what it reads
// and, at the client's end of stream, writes "bye" and closes.
func startEcho(t testing.TB, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				if _, err := io.Copy(c, c); err == nil {
					io.WriteString(c, "bye")
				}
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// cleanEnv is the environment without proxy variables, for the
// clients run as commands.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasSuffix(strings.ToLower(k), "_proxy") {
			env = append(env, kv)
		}
	}
	return env
}
