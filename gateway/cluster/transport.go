package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"
)

// Errors of a request through WithHeaderTimeout. ErrHeaderTimeout and
// ErrUnreachable are the peer's failures (PeerFailed); ErrSendTimeout may
// be the sender's own pace, such as a client's slow body streamed through.
var (
	// ErrHeaderTimeout is the cause of a request whose response headers
	// did not come within its header timeout although the whole request
	// was sent (or no connection came in that time): the peer accepted
	// and did not answer, as a frozen node does.
	ErrHeaderTimeout = errors.New("cluster: peer sent no response headers in time")
	// ErrSendTimeout is the cause of a request that was still being sent
	// when its header timeout ran out: its body came too slowly.
	ErrSendTimeout = errors.New("cluster: request not sent within the peer timeout")
	// ErrUnreachable wraps the error of a request that got no connection:
	// the dial, the TLS handshake or the name lookup failed.
	ErrUnreachable = errors.New("cluster: peer not reachable")
)

// PeerFailed reports whether err, from a request through
// WithHeaderTimeout, is the peer's failure (ErrUnreachable or
// ErrHeaderTimeout): what marks a node down. A request that failed while
// its body was still being sent, or after the caller ended it, or whose
// answer broke off, says nothing of the peer's health.
func PeerFailed(err error) bool {
	return errors.Is(err, ErrHeaderTimeout) || errors.Is(err, ErrUnreachable)
}

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
// ErrHeaderTimeout when it had been sent whole (or had no connection
// yet), and ErrSendTimeout while its body was still being sent: a body
// streamed from a slow client is that client's pace, not the peer's
// silence. A request that got no connection fails with an error wrapping
// ErrUnreachable. The body that follows the headers is not bounded;
// closing it ends the request. A 101 response's body stays an
// io.ReadWriteCloser, as httputil.ReverseProxy needs for an upgrade.
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
	var sent progress
	ctx = httptrace.WithClientTrace(ctx, sent.trace())
	timer := time.AfterFunc(h.d+extra, func() { cancel(ErrHeaderTimeout) })
	resp, err := h.rt.RoundTrip(req.WithContext(ctx))
	if !timer.Stop() && errors.Is(context.Cause(ctx), ErrHeaderTimeout) {
		if err == nil {
			resp.Body.Close()
		}
		cancel(nil)
		cause := ErrHeaderTimeout
		if sent.connected.Load() && !sent.wrote.Load() {
			cause = ErrSendTimeout
		}
		return nil, fmt.Errorf("%s %s: %w (%s)", req.Method, req.URL.Redacted(), cause, h.d+extra)
	}
	if err != nil {
		cancel(nil)
		if !sent.connected.Load() && req.Context().Err() == nil {
			return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
		}
		return nil, err
	}
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok {
		resp.Body = &upgradedBody{rwc, cancel}
	} else {
		resp.Body = &body{resp.Body, cancel}
	}
	return resp, nil
}

// progress is how far a request got: a connection, then the whole
// request written.
type progress struct {
	connected, wrote atomic.Bool
}

func (p *progress) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { p.connected.Store(true) },
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				p.wrote.Store(true)
			}
		},
	}
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
