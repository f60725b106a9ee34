package proxy

import (
	"errors"
	"net"
	"net/netip"
	"time"
)

// errNotRedirected is the Record.Err of a connection made to the
// transparent listener itself, not sent there by a redirect.
var errNotRedirected = errors.New("proxy: the connection was not redirected: it has no original destination outside loopback")

// serveTransparent serves a connection a redirect sent to the
// transparent listener: it asks the Dialer for the connection's
// original destination, as the name that address stands for when it is
// a synthetic one (Server.Names), then splices the two. The program is
// told nothing but by the connection itself: a refusal or a failure
// resets it.
func (h *clientConn) serveTransparent() {
	dst, err := originalDst(h.c)
	if err == nil && (dst.Addr().IsLoopback() || dst.Addr().IsUnspecified()) {
		err = errNotRedirected
	}
	if err != nil {
		h.reset()
		r := Record{Protocol: Transparent, Port: dst.Port(), Err: err}
		if dst.Addr().IsValid() {
			r.Host = dst.Addr().String()
		}
		h.s.record(r)
		return
	}
	host, port := dst.Addr().String(), dst.Port()
	var target net.Conn
	if name, fake := h.s.names(dst.Addr()); fake && name == "" {
		err = &Refused{Reason: host + " is an address termgate's DNS gave out for a name it no longer holds: look the name up again"}
		if r, ok := h.s.Dialer.(Refuser); ok {
			r.Refuse("tcp", host, port, err.(*Refused).Reason)
		}
	} else {
		if fake {
			host = name
		}
		target, err = h.dial(host, port)
	}
	if err != nil {
		h.reset()
		h.s.record(failed(Transparent, host, port, err))
		return
	}
	defer h.s.untrack(target)
	h.c.SetDeadline(time.Time{})
	r := Record{Protocol: Transparent, Host: host, Port: port, Target: target}
	h.spliceTo(target, &r)
	h.s.record(r)
}

// names is Server.Names, or none.
func (s *Server) names(a netip.Addr) (string, bool) {
	if s.Names == nil {
		return "", false
	}
	return s.Names(a)
}

// reset closes the client's connection with a reset (SO_LINGER 0), which
// the program reads as ECONNRESET: the closest a connection already
// accepted comes to a refused connect.
func (h *clientConn) reset() {
	if tc, ok := h.c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	h.c.Close()
}
