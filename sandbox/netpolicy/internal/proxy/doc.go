// Package proxy speaks the proxy protocols a sandboxed program uses to
// reach the network through termgate: HTTP CONNECT, plain HTTP
// forwarding and SOCKS5, all on one listener that the program reaches on
// its own 127.0.0.1. A Server serves the listener from the host; how the
// listener was opened is not its business, and neither is policy: every
// connection to a target is asked of its Dialer, which connects or
// returns a *Refused.
//
// The first byte of a connection tells the protocol: 0x05 is SOCKS5,
// anything else HTTP.
//
//   - HTTP CONNECT host:port: the Dialer connects, the client gets
//     "200 Connection established", and the bytes are then copied both
//     ways as they are. A refusal is answered 403 with the Refused's
//     Reason as a text body, a failed connect 502 (504 when it timed
//     out) with a short reason, a malformed request 400, a head over
//     MaxHeaderBytes 431, and a connection beyond MaxConns 503.
//   - Plain HTTP: requests in absolute form (GET http://host/path) are
//     sent to the target in origin form, without hop-by-hop headers
//     (Connection and the headers it names, Proxy-Connection,
//     Proxy-Authorization, Keep-Alive, TE but "trailers", Upgrade but on
//     a request to upgrade); framing (Content-Length, chunked, trailers)
//     is net/http's. Bodies are streamed both ways, never held whole, and
//     each part of a response reaches the client before the proxy reads
//     the next. A client connection serves requests one after another,
//     to one target or several: it keeps its last target's connection
//     for the next request to the same host and port. A 101 Switching
//     Protocols turns the two connections into a tunnel. Error answers
//     are those of CONNECT, after which the connection is closed.
//   - SOCKS5 (RFC 1928): the "no authentication" method (a client that
//     offers no other gets 0xFF), the CONNECT command (BIND and UDP
//     ASSOCIATE get 0x07), IPv4, IPv6 and domain-name targets (others
//     get 0x08). A refusal is answered 0x02, a failed connect 0x03,
//     0x04, 0x05 or 0x06 (timed out) as the error says, and a connection
//     beyond MaxConns 0x01. The bound address of every reply is
//     0.0.0.0:0.
//
// ServeTransparent serves a fourth kind of connection, on a listener of
// its own: one that a sandbox's redirect (sandbox.Redirect) sent there
// from a program that connected to an outside address itself, ignoring
// any proxy. Its original destination (SO_ORIGINAL_DST, or
// IP6T_SO_ORIGINAL_DST on IPv6) is the target: the Dialer is asked for
// the name it stands for when Names says it is a synthetic address of
// termgate's DNS stub (the name is exact: the stub gave that address for
// that name alone), and for the address itself otherwise, with the
// original port; then the two are spliced as a tunnel is (Record
// Protocol Transparent). A refusal, a failed Dial, a synthetic address
// that names nothing any longer, and a connection made to the listener
// itself (its destination is loopback: nothing redirected it) reset the
// connection (SO_LINGER 0), which the program reads as ECONNRESET, and
// give Done their Record, so the caller can tell the person at the
// terminal. Nothing the program sends is read before the decision: a
// TLS SNI or an HTTP Host naming an allowed host while the connection
// goes to another address must not open it (domain fronting), so they
// could only refuse, never allow; and server-speaks-first protocols
// (SSH, SMTP, PostgreSQL) send nothing to wait for.
//
// A tunnel (CONNECT, SOCKS5, upgrade or transparent) half-closes: when one side ends
// its stream, the other side's connection is shut down for writing only,
// so git and TLS close cleanly. It has no idle timeout, since long-lived
// connections are legitimate; Close ends it. Each way of a tunnel waits
// for its source to be readable holding no buffer, then copies with a
// pooled 256 KiB buffer until the source would block: an idle tunnel
// holds no buffer in the process, and costs two goroutines. A plain-HTTP client connection holds a 4 KiB read
// and a 4 KiB write buffer, and its target connection as many.
//
// ServeUDP relays UDP the same way, on a socket of its own
// (PacketConn) that the redirect sends every datagram to an outside
// address (DNS aside); conntrack tells where each was going. A program
// socket's datagrams are a flow to the destination of its first, asked
// of the Dialer once (a UDPDialer; Names as for TCP) and ended when no
// datagram crossed for UDPIdleTimeout, below conntrack's hold, so that a
// flow never outlives the entry naming its destination; answers go back
// through the socket, and reach the program as from the destination. A
// refused or failed flow drops its datagrams and is not asked again
// until it idles: UDP has no refusal to give. At most MaxUDPFlows flows
// at once, each with a queue of 32 datagrams while its target is being
// connected; a datagram with no room is dropped and its bytes counted
// in a Record (Dropped), never lost unsaid. An idle flow holds two
// goroutines and no buffer: its answer is read into a pooled 64 KiB
// buffer taken once a datagram is there.
//
// Limits: a client has HandshakeTimeout from accept to the end of its
// SOCKS5 request or HTTP request head, and KeepAliveTimeout between two
// plain HTTP requests; it is closed when they pass. A Dial has
// DialTimeout. At most MaxConns clients are served at once; a few more
// are told so, and beyond them a connection is closed as accepted.
//
// Every connection made to a target, and every one refused or failed,
// gives the Server's Done a Record with the bytes each way. Close closes
// the listeners and every connection, and returns once every goroutine
// of the Server has ended.
package proxy
