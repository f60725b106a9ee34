package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"
)

// clientConn is one program's connection to the Server.
type clientConn struct {
	s    *Server
	c    net.Conn
	lr   *headLimiter  // below br: bounds a request's head
	br   *bufio.Reader // everything read from c until a splice
	busy bool          // the Server was full: the client is told so
}

// dial asks the Dialer for a connection to host and port, and tracks it
// so that Close closes it.
func (h *clientConn) dial(host string, port uint16) (net.Conn, error) {
	if h.busy {
		return nil, ErrBusy
	}
	ctx, cancel := context.WithTimeout(h.s.ctx, h.s.dialTimeout())
	defer cancel()
	c, err := h.s.Dialer.Dial(ctx, host, port)
	if err != nil {
		if h.s.ctx.Err() != nil {
			err = ErrClosed
		}
		return nil, err
	}
	if !h.s.track(c) {
		c.Close()
		return nil, ErrClosed
	}
	return c, nil
}

// writeReply writes b to the client within the handshake timeout.
func (h *clientConn) writeReply(b []byte) error {
	h.c.SetWriteDeadline(time.Now().Add(h.s.handshakeTimeout()))
	_, err := h.c.Write(b)
	h.c.SetWriteDeadline(time.Time{})
	return err
}

// spliceTo sends what the client sent ahead of the reply to the
// target, then copies both ways until both ends are done.
func (h *clientConn) spliceTo(target net.Conn, r *Record) {
	if h.br != nil && h.br.Buffered() > 0 { // none for a transparent connection
		b, _ := h.br.Peek(h.br.Buffered())
		m, err := target.Write(b)
		r.Up += int64(m)
		if err != nil {
			return
		}
	}
	h.br = nil // the splice reads the raw connection
	up, down := splice(h.c, target)
	r.Up += up
	r.Down += down
}

// failure is how a Dial's error is told to the program.
type failure struct {
	socks  byte   // the SOCKS5 reply
	status int    // the HTTP status
	text   string // short and safe to show
}

// The SOCKS5 replies (RFC 1928, section 6).
const (
	socksSucceeded          = 0x00
	socksGeneralFailure     = 0x01
	socksNotAllowed         = 0x02
	socksNetworkUnreachable = 0x03
	socksHostUnreachable    = 0x04
	socksConnectionRefused  = 0x05
	socksTTLExpired         = 0x06
	socksCommandUnsupported = 0x07
	socksAddressUnsupported = 0x08
)

// classify maps a Dial's error to what the program is told. The text of
// other errors stays out: it may name the addresses a name resolved to.
func classify(err error) failure {
	var refused *Refused
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case errors.As(err, &refused):
		return failure{socksNotAllowed, http.StatusForbidden, refused.Reason}
	case errors.Is(err, ErrBusy):
		return failure{socksGeneralFailure, http.StatusServiceUnavailable, "too many connections"}
	case errors.Is(err, ErrClosed):
		return failure{socksGeneralFailure, http.StatusServiceUnavailable, "proxy closing"}
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return failure{socksTTLExpired, http.StatusGatewayTimeout, "connect timed out"}
	case errors.Is(err, syscall.ECONNREFUSED):
		return failure{socksConnectionRefused, http.StatusBadGateway, "connection refused"}
	case errors.Is(err, syscall.ENETUNREACH):
		return failure{socksNetworkUnreachable, http.StatusBadGateway, "network unreachable"}
	case errors.Is(err, syscall.EHOSTUNREACH):
		return failure{socksHostUnreachable, http.StatusBadGateway, "host unreachable"}
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return failure{socksHostUnreachable, http.StatusBadGateway, "no such host"}
	}
	return failure{socksGeneralFailure, http.StatusBadGateway, "connect failed"}
}

// failed makes the Record of a Dial that did not connect.
func failed(p Protocol, host string, port uint16, err error) Record {
	r := Record{Protocol: p, Host: host, Port: port}
	var refused *Refused
	if errors.As(err, &refused) {
		r.Refused = refused.Reason
	} else {
		r.Err = err
	}
	return r
}

// headLimiter reads from r, at most n bytes while limiting: it bounds
// an HTTP request's head below the bufio.Reader that parses it.
type headLimiter struct {
	r        io.Reader
	n        int64
	limiting bool
	hit      bool // the limit ended a read
}

// errHeadTooLarge ends a read past MaxHeaderBytes.
var errHeadTooLarge = errors.New("proxy: request head too large")

func (l *headLimiter) Read(p []byte) (int, error) {
	if !l.limiting {
		return l.r.Read(p)
	}
	if l.n <= 0 {
		l.hit = true
		return 0, errHeadTooLarge
	}
	p = p[:min(int64(len(p)), l.n)]
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// limit starts bounding the next bytes read to MaxHeaderBytes.
func (l *headLimiter) limit() { l.n, l.limiting, l.hit = MaxHeaderBytes, true, false }

// unlimit stops bounding reads.
func (l *headLimiter) unlimit() { l.limiting = false }
