package cluster

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
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
