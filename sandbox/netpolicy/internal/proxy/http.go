package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// serveHTTP serves an HTTP client: requests in absolute form one after
// another on the connection, until a CONNECT turns it into a tunnel.
func (h *clientConn) serveHTTP() {
	f := &forwarder{h: h}
	defer f.drop()
	for first := true; ; first = false {
		if !first && !h.awaitRequest() {
			return
		}
		req, err := http.ReadRequest(h.br)
		h.lr.unlimit()
		if err != nil {
			h.badHead(err)
			return
		}
		h.c.SetDeadline(time.Time{})
		if req.Method == http.MethodConnect {
			f.drop()
			h.serveConnect(req)
			return
		}
		if !f.forward(req) {
			return
		}
	}
}

// awaitRequest waits up to the keep-alive timeout for the next request
// to start, then gives its head the handshake timeout and
// MaxHeaderBytes.
func (h *clientConn) awaitRequest() bool {
	h.lr.limit()
	h.c.SetReadDeadline(time.Now().Add(h.s.keepAliveTimeout()))
	if _, err := h.br.Peek(1); err != nil {
		return false
	}
	h.c.SetReadDeadline(time.Now().Add(h.s.handshakeTimeout()))
	return true
}

// badHead answers a request whose head could not be read, unless the
// client is gone or timed out.
func (h *clientConn) badHead(err error) {
	var ne net.Error
	switch {
	case h.lr.hit:
		h.refuse(http.StatusRequestHeaderFieldsTooLarge, "request head larger than "+strconv.Itoa(MaxHeaderBytes)+" bytes")
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed), errors.As(err, &ne):
	default:
		h.refuse(http.StatusBadRequest, "malformed request")
	}
}

// serveConnect serves a CONNECT: a tunnel to the target once the Dialer
// connected, or the status that says why not.
func (h *clientConn) serveConnect(req *http.Request) {
	host, port, ok := splitTarget(req.URL.Host, 0)
	if !ok {
		h.refuse(http.StatusBadRequest, "CONNECT needs host:port")
		return
	}
	target, err := h.dial(host, port)
	if err != nil {
		f := classify(err)
		h.refuse(f.status, f.text)
		h.s.record(failed(HTTPConnect, host, port, err))
		return
	}
	defer h.s.untrack(target)
	r := Record{Protocol: HTTPConnect, Host: host, Port: port, Target: target}
	if h.writeReply([]byte("HTTP/1.1 200 Connection established\r\n\r\n")) == nil {
		h.spliceTo(target, &r)
	}
	h.s.record(r)
}

// writeStatus answers a request the Server could not serve, with text
// as the body; the connection is closed after it.
func (h *clientConn) writeStatus(status int, text string) error {
	body := text + "\n"
	head := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
		status, http.StatusText(status), len(body))
	return h.writeReply([]byte(head + body))
}

// refuse is writeStatus, then linger: for an answer given before the
// request was read to its end.
func (h *clientConn) refuse(status int, text string) {
	if h.writeStatus(status, text) == nil {
		h.linger()
	}
}

// linger half-closes the connection and reads what the client still
// sends, for a moment, before the connection is closed: closing with
// bytes unread would reset it, and the client could lose the answer.
func (h *clientConn) linger() {
	if cw, ok := h.c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	h.c.SetReadDeadline(time.Now().Add(lingerTimeout))
	io.CopyN(io.Discard, h.c, lingerBytes)
}

// splitTarget splits host[:port], taking defaultPort when the port is
// missing and defaultPort is not 0. ok is false for anything else.
func splitTarget(hostport string, defaultPort uint16) (host string, port uint16, ok bool) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		if defaultPort == 0 {
			return "", 0, false
		}
		host, p = hostport, strconv.Itoa(int(defaultPort))
		if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
			host = host[1 : len(host)-1]
		}
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 || host == "" || len(host) > 255 {
		return "", 0, false
	}
	return host, uint16(n), true
}
