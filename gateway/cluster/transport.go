package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// ErrHeaderTimeout is the cause of a request whose response headers did
// not come within its header timeout: the peer accepted and did not
// answer, as a frozen node does.
var ErrHeaderTimeout = errors.New("cluster: peer sent no response headers in time")

// NewTransport returns the transport for requests to peers: TCP connect
// within dial, keep-alive connections (up to 64 idle per peer), and no
// proxy from the environment (peers are reached directly).
func NewTransport(dial time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: dial, KeepAlive: 15 * time.Second}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		TLSHandshakeTimeout:   dial,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

type extraKey struct{}

// ExtendHeaderTimeout returns a context under which WithHeaderTimeout
// waits extra longer for response headers (added to any earlier
// extension): for a long poll that answers only after its wait.
func ExtendHeaderTimeout(ctx context.Context, extra time.Duration) context.Context {
	prev, _ := ctx.Value(extraKey{}).(time.Duration)
	return context.WithValue(ctx, extraKey{}, prev+extra)
}

// WithHeaderTimeout returns rt bounded to d (plus the request context's
// ExtendHeaderTimeout) from sending a request to receiving its response
// headers. A request that runs out fails with an error wrapping
// ErrHeaderTimeout. The body that follows is not bounded; closing it ends
// the request. A 101 response's body stays an io.ReadWriteCloser, as
// httputil.ReverseProxy needs for an upgrade.
func WithHeaderTimeout(rt http.RoundTripper, d time.Duration) http.RoundTripper {
	return headerTimeout{rt, d}
}

type headerTimeout struct {
	rt http.RoundTripper
	d  time.Duration
}

func (h headerTimeout) RoundTrip(req *http.Request) (*http.Response, error) {
	extra, _ := req.Context().Value(extraKey{}).(time.Duration)
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(h.d+extra, func() { cancel(ErrHeaderTimeout) })
	resp, err := h.rt.RoundTrip(req.WithContext(ctx))
	if !timer.Stop() && errors.Is(context.Cause(ctx), ErrHeaderTimeout) {
		if err == nil {
			resp.Body.Close()
		}
		cancel(nil)
		return nil, fmt.Errorf("%s %s: %w (%s)", req.Method, req.URL.Redacted(), ErrHeaderTimeout, h.d+extra)
	}
	if err != nil {
		cancel(nil)
		return nil, err
	}
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok {
		resp.Body = &upgradedBody{rwc, cancel}
	} else {
		resp.Body = &body{resp.Body, cancel}
	}
	return resp, nil
}

// body ends its request's context when closed.
type body struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (b *body) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}

// upgradedBody is body for a switched protocol: it also writes.
type upgradedBody struct {
	io.ReadWriteCloser
	cancel context.CancelCauseFunc
}

func (b *upgradedBody) Close() error {
	err := b.ReadWriteCloser.Close()
	b.cancel(nil)
	return err
}
