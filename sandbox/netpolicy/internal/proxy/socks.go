package proxy

import (
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"slices"
	"time"
)

// SOCKS5's wire values (RFC 1928).
const (
	socksVersion      = 0x05
	socksNoAuth       = 0x00
	socksNoAcceptable = 0xFF
	socksConnect      = 0x01
	socksIPv4         = 0x01
	socksDomain       = 0x03
	socksIPv6         = 0x04
)

// errSOCKSVersion ends a connection whose request is not SOCKS5's.
var errSOCKSVersion = errors.New("proxy: not a SOCKS5 request")

// socksRequest is a SOCKS5 request as read. reply is non-zero when the
// request cannot be served: the reply the client gets.
type socksRequest struct {
	host  string
	port  uint16
	reply byte
}

// serveSOCKS serves a SOCKS5 client: no authentication, CONNECT only.
func (h *clientConn) serveSOCKS() {
	if ok, err := h.negotiateSOCKS(); !ok || err != nil {
		return
	}
	req, err := readSOCKSRequest(h.br)
	if err != nil {
		return
	}
	if req.reply != socksSucceeded {
		h.writeReply(socksReply(req.reply))
		return
	}
	h.c.SetDeadline(time.Time{})
	target, err := h.dial(req.host, req.port)
	if err != nil {
		h.writeReply(socksReply(classify(err).socks))
		h.s.record(failed(SOCKS5, req.host, req.port, err))
		return
	}
	defer h.s.untrack(target)
	r := Record{Protocol: SOCKS5, Host: req.host, Port: req.port, Target: target}
	if h.writeReply(socksReply(socksSucceeded)) == nil {
		h.spliceTo(target, &r)
	}
	h.s.record(r)
}

// negotiateSOCKS reads the client's methods and picks "no
// authentication"; false when the client does not offer it (it is told
// so).
func (h *clientConn) negotiateSOCKS() (bool, error) {
	var head [2]byte
	if _, err := io.ReadFull(h.br, head[:]); err != nil {
		return false, err
	}
	methods := make([]byte, head[1])
	if _, err := io.ReadFull(h.br, methods); err != nil {
		return false, err
	}
	if !slices.Contains(methods, socksNoAuth) {
		return false, h.writeReply([]byte{socksVersion, socksNoAcceptable})
	}
	return true, h.writeReply([]byte{socksVersion, socksNoAuth})
}

// readSOCKSRequest reads a request: VER CMD RSV ATYP DST.ADDR DST.PORT.
// An error means the request could not be read (or was not SOCKS5's):
// the connection is closed without a reply.
func readSOCKSRequest(r io.Reader) (socksRequest, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return socksRequest{}, err
	}
	if head[0] != socksVersion {
		return socksRequest{}, errSOCKSVersion
	}
	var n int
	switch head[3] {
	case socksIPv4:
		n = 4
	case socksIPv6:
		n = 16
	case socksDomain:
		var l [1]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return socksRequest{}, err
		}
		n = int(l[0])
	default:
		return socksRequest{reply: socksAddressUnsupported}, nil // its length is unknown
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return socksRequest{}, err
	}
	addr := buf[:n]
	req := socksRequest{port: binary.BigEndian.Uint16(buf[n:])}
	switch {
	case head[1] != socksConnect:
		req.reply = socksCommandUnsupported
	case head[3] == socksDomain:
		req.host = string(addr)
		if !validName(req.host) {
			req.reply = socksHostUnreachable
		}
	default:
		ip, _ := netip.AddrFromSlice(addr)
		req.host = ip.Unmap().String() // ::ffff:a.b.c.d is a.b.c.d to the Dialer
	}
	return req, nil
}

// validName reports whether a SOCKS5 domain name could be a host name:
// not empty, printable ASCII without spaces. The Dialer judges the rest.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// socksReply is a reply with the given code. The bound address is
// always 0.0.0.0:0: the host's own address is none of the program's
// business.
func socksReply(code byte) []byte {
	return []byte{socksVersion, code, 0, socksIPv4, 0, 0, 0, 0, 0, 0}
}
