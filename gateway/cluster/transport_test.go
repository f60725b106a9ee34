package cluster

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// stallServer answers after release is closed (or the request ends);
// with body, it sends headers at once and the body after release.
func stallServer(t *testing.T, release <-chan struct{}, headersFirst bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if headersFirst {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "done")
	}))
	t.Cleanup(srv.Close)
	return srv
}

func get(ctx context.Context, rt http.RoundTripper, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return "", err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestHeaderTimeout: a peer that accepts and never sends headers fails
// the request with ErrHeaderTimeout.
func TestHeaderTimeout(t *testing.T) {
	t.Parallel()
	srv := stallServer(t, nil, false) // never released
	tr := NewTransport(time.Second)
	defer tr.CloseIdleConnections()
	_, err := get(t.Context(), WithHeaderTimeout(tr, 50*time.Millisecond), srv.URL)
	if !errors.Is(err, ErrHeaderTimeout) {
		t.Fatalf("get = %v, want ErrHeaderTimeout", err)
	}
}

// TestHeaderTimeoutExtended: ExtendHeaderTimeout lets a long poll answer
// after the plain timeout.
func TestHeaderTimeoutExtended(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := stallServer(t, release, false)
	tr := NewTransport(time.Second)
	defer tr.CloseIdleConnections()
	time.AfterFunc(200*time.Millisecond, func() { close(release) }) // 4x the plain timeout, far within the extension
	got, err := get(ExtendHeaderTimeout(t.Context(), time.Minute), WithHeaderTimeout(tr, 50*time.Millisecond), srv.URL)
	if err != nil || got != "done" {
		t.Fatalf("get = %q, %v", got, err)
	}
}

// TestHeaderTimeoutSparesBody: once headers came, a slow body is read to
// its end: the timeout bounds headers only.
func TestHeaderTimeoutSparesBody(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := stallServer(t, release, true)
	tr := NewTransport(time.Second)
	defer tr.CloseIdleConnections()
	time.AfterFunc(200*time.Millisecond, func() { close(release) })
	got, err := get(t.Context(), WithHeaderTimeout(tr, 50*time.Millisecond), srv.URL)
	if err != nil || got != "done" {
		t.Fatalf("get = %q, %v", got, err)
	}
}

// TestHeaderTimeoutBlamesOnlyThePeer: the timeout is the peer's failure
// (PeerFailed) only once the whole request was sent: a body that comes
// slower than the timeout fails its request with ErrSendTimeout, and the
// same peer, silent after a whole request, with ErrHeaderTimeout. A
// refused dial is ErrUnreachable.
func TestHeaderTimeoutBlamesOnlyThePeer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done() // never answers
	}))
	t.Cleanup(srv.Close)
	tr := NewTransport(time.Second)
	defer tr.CloseIdleConnections()
	rt := WithHeaderTimeout(tr, 100*time.Millisecond)
	post := func(body io.Reader) error {
		req, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL, body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	slow, w := io.Pipe()
	go func() { // one byte every 50 ms: the whole body takes 10 timeouts
		defer w.Close()
		for range 20 {
			time.Sleep(50 * time.Millisecond)
			if _, err := w.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	if err := post(slow); !errors.Is(err, ErrSendTimeout) || PeerFailed(err) {
		t.Errorf("a slow body: %v, want ErrSendTimeout, not the peer's failure", err)
	}
	slow.Close()
	if err := post(strings.NewReader("whole")); !errors.Is(err, ErrHeaderTimeout) || !PeerFailed(err) {
		t.Errorf("a whole request, no answer: %v, want ErrHeaderTimeout", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	if _, err := get(t.Context(), rt, closed); !errors.Is(err, ErrUnreachable) || !PeerFailed(err) {
		t.Errorf("a refused dial: %v, want ErrUnreachable", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := get(ctx, rt, closed); PeerFailed(err) {
		t.Errorf("a request whose caller left: %v, want no peer failure", err)
	}
}

// TestHeaderTimeoutUpgrade: a 101 answer's body still reads and writes
// (httputil.ReverseProxy needs an io.ReadWriteCloser), past the timeout.
func TestHeaderTimeoutUpgrade(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		rw.Flush()
		line, _ := rw.ReadString('\n')
		rw.WriteString(line)
		rw.Flush()
	}))
	defer srv.Close()
	tr := NewTransport(time.Second)
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := WithHeaderTimeout(tr, 50*time.Millisecond).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != 101 || !ok {
		t.Fatalf("status %d, body %T", resp.StatusCode, resp.Body)
	}
	time.Sleep(100 * time.Millisecond) // past the header timeout: the connection lives on
	if _, err := io.WriteString(rwc, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(rwc).ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo = %q, %v", line, err)
	}
}

// TestTransportIgnoresProxyEnvironment: peers are dialled directly even
// when HTTP_PROXY is set: a nil Proxy never reads the environment.
func TestTransportIgnoresProxyEnvironment(t *testing.T) {
	t.Parallel()
	if tr := NewTransport(time.Second); tr.Proxy != nil || tr.MaxIdleConnsPerHost != 64 {
		t.Fatalf("Proxy set (%v) or idle connections %d", tr.Proxy != nil, tr.MaxIdleConnsPerHost)
	}
}
