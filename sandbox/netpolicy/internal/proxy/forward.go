package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// forwarder forwards a client connection's plain HTTP requests, each to
// its target in origin form. It keeps one target connection: the next
// request to the same host and port reuses it, one to another target
// closes it and dials anew. Requests and responses are streamed with
// net/http's own readers and writers (ReadRequest, Request.Write,
// ReadResponse, Response.Write), which handle the framing (Content-Length,
// chunked, trailers, 1xx, HEAD); a pooling http.Transport would share
// target connections between Dials the policy made at other times.
type forwarder struct {
	h  *clientConn
	cw *bufio.Writer // to the client, flushed before each read of a body

	// the target connection, or none
	target *countConn
	host   string
	port   uint16
	tr     *bufio.Reader
	tw     *bufio.Writer
}

// forward serves one request; false means the client connection ends.
func (f *forwarder) forward(req *http.Request) bool {
	h := f.h
	host, port, ok := splitTarget(req.URL.Host, 80)
	if req.URL.Scheme != "http" || !ok {
		h.refuse(http.StatusBadRequest, "not a proxy request: give an absolute http:// URL, or use CONNECT")
		return false
	}
	if err := f.connect(host, port); err != nil {
		fl := classify(err)
		h.refuse(fl.status, fl.text)
		h.s.record(failed(HTTPForward, host, port, err))
		return false
	}
	upgrade := prepareRequest(req)
	var body *trackedBody
	if req.ContentLength != 0 {
		body = &trackedBody{ReadCloser: req.Body}
		req.Body = body
	}
	sent := make(chan error, 1)
	go f.send(req, sent) // owned by forward, which always receives from sent
	resp, err := f.receive(req)
	if err != nil {
		h.writeStatus(http.StatusBadGateway, "no response from "+net.JoinHostPort(host, strconv.Itoa(int(port))))
		return f.abort(sent)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if upgrade == "" {
			h.writeStatus(http.StatusBadGateway, "switching protocols unasked")
			return f.abort(sent)
		}
		return f.upgrade(resp, sent)
	}
	keepClient, keepTarget := f.respond(req, resp)
	if body != nil && !body.done.Load() {
		// The target answered before it read the whole body: the rest
		// of the request cannot be told from a next one.
		return f.abort(sent)
	}
	if <-sent != nil || !keepTarget {
		f.drop()
	}
	return keepClient
}

// connect makes sure the target connection leads to host and port,
// and that the target has not closed it while it was idle.
func (f *forwarder) connect(host string, port uint16) error {
	if f.target != nil && f.host == host && f.port == port && f.tr.Buffered() == 0 && !peerClosed(f.target.Conn) {
		return nil
	}
	f.drop()
	c, err := f.h.dial(host, port)
	if err != nil {
		return err
	}
	f.target = &countConn{Conn: c}
	f.host, f.port = host, port
	f.tr = bufio.NewReaderSize(f.target, readBufferSize)
	f.tw = bufio.NewWriterSize(f.target, readBufferSize)
	if f.cw == nil {
		f.cw = bufio.NewWriterSize(f.h.c, readBufferSize)
	}
	return nil
}

// drop closes the target connection, if any, and records it.
func (f *forwarder) drop() {
	if f.target == nil {
		return
	}
	f.h.s.untrack(f.target.Conn)
	f.h.s.record(Record{Protocol: HTTPForward, Host: f.host, Port: f.port, Up: f.target.written.Load(), Down: f.target.read.Load(), Target: f.target.Conn})
	f.target, f.tr, f.tw = nil, nil, nil
}

// abort ends both connections, after which the sender returns.
func (f *forwarder) abort(sent <-chan error) bool {
	f.h.c.Close()
	f.target.Close()
	<-sent
	f.drop()
	return false
}

// send writes the request to the target, its body as the client sends
// it, and reports the outcome on sent. A request it cannot write closes
// the target connection, so that the wait for a response ends too.
func (f *forwarder) send(req *http.Request, sent chan<- error) {
	target := f.target
	err := req.Write(f.tw)
	if err == nil {
		err = f.tw.Flush()
	}
	if err != nil {
		target.Close()
	}
	sent <- err
}

// receive reads the target's response, forwarding the interim (1xx)
// ones to the client; a 101 is returned like a final one.
func (f *forwarder) receive(req *http.Request) (*http.Response, error) {
	for {
		resp, err := http.ReadResponse(f.tr, req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
		removeHopHeaders(resp.Header)
		if err := resp.Write(f.cw); err != nil {
			return nil, err
		}
		if err := f.cw.Flush(); err != nil {
			return nil, err
		}
	}
}

// respond writes the response to the client, its body as it comes; it
// reports whether the client and the target connections may serve
// another request.
func (f *forwarder) respond(req *http.Request, resp *http.Response) (keepClient, keepTarget bool) {
	removeHopHeaders(resp.Header)
	targetClose := resp.Close
	resp.Close = req.Close || !req.ProtoAtLeast(1, 1)
	if !req.ProtoAtLeast(1, 1) {
		resp.TransferEncoding = nil // an HTTP/1.0 client reads to the end
	}
	if resp.ContentLength < 0 && !chunked(resp.TransferEncoding) {
		resp.Close = true // the body ends where the connection does
	}
	resp.Body = &flushingBody{ReadCloser: resp.Body, w: f.cw}
	err := resp.Write(writerOnly{f.cw})
	if err == nil {
		err = f.cw.Flush()
	}
	return err == nil && !resp.Close, err == nil && !targetClose
}

func chunked(te []string) bool { return len(te) > 0 && te[0] == "chunked" }

// upgrade passes a 101 to the client and splices the two connections,
// which then speak the protocol they switched to.
func (f *forwarder) upgrade(resp *http.Response, sent <-chan error) bool {
	if <-sent != nil {
		f.drop()
		return false
	}
	proto := resp.Header.Get("Upgrade")
	removeHopHeaders(resp.Header)
	resp.Header.Set("Connection", "Upgrade")
	resp.Header.Set("Upgrade", proto)
	if resp.Write(f.cw) != nil || f.flushBuffered() != nil {
		f.drop()
		return false
	}
	r := Record{Protocol: HTTPForward, Host: f.host, Port: f.port, Up: f.target.written.Load(), Down: f.target.read.Load(), Target: f.target.Conn}
	target := f.target.Conn
	f.target = nil
	defer f.h.s.untrack(target)
	f.h.spliceTo(target, &r)
	f.h.s.record(r)
	return false
}

// flushBuffered sends the client what the target sent after its 101
// and is still in the target's reader.
func (f *forwarder) flushBuffered() error {
	if n := f.tr.Buffered(); n > 0 {
		b, _ := f.tr.Peek(n)
		if _, err := f.cw.Write(b); err != nil {
			return err
		}
	}
	return f.cw.Flush()
}

// prepareRequest turns a proxy request into the target's: origin form
// (Request.Write writes it so), without hop-by-hop headers, and without
// the Go user agent that Request.Write would add. It returns the
// protocol asked for by a request to upgrade, which is passed on.
func prepareRequest(req *http.Request) (upgrade string) {
	if hasToken(req.Header["Connection"], "upgrade") {
		upgrade = req.Header.Get("Upgrade")
	}
	trailers := hasToken(req.Header["Te"], "trailers")
	removeHopHeaders(req.Header)
	if trailers {
		req.Header.Set("Te", "trailers")
	}
	if upgrade != "" {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", upgrade)
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""}
	}
	req.RequestURI = ""
	return upgrade
}

// hopHeaders are the headers meant for one connection only (RFC 9110,
// section 7.6.1), with the proxies' own. Transfer-Encoding and Trailer
// are read by net/http into the request's and response's fields and
// written again from them.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopHeaders removes the hop-by-hop headers, and those the
// Connection header names.
func removeHopHeaders(h http.Header) {
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// hasToken reports whether a comma-separated header value lists token.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(textproto.TrimString(t), token) {
				return true
			}
		}
	}
	return false
}

// peerClosed reports whether an idle connection was closed by its peer
// or has bytes nobody asked for, without waiting: a kept target
// connection is checked so before it serves the next request (which
// could otherwise meet the target's idle close and be answered 502).
func peerClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	unusable := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		unusable = n > 0 || err == nil || err != syscall.EAGAIN
		return true
	})
	return unusable || err != nil
}

// countConn counts a target connection's bytes each way.
type countConn struct {
	net.Conn
	read, written atomic.Int64
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

// trackedBody notes that a request's body was read to its end.
type trackedBody struct {
	io.ReadCloser
	done atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.done.Store(true)
	}
	return n, err
}

// flushingBody flushes w before each read of a response's body, so the
// client gets every part the target sent before the proxy waits for
// the next: streamed responses stay streamed.
type flushingBody struct {
	io.ReadCloser
	w *bufio.Writer
}

func (b *flushingBody) Read(p []byte) (int, error) {
	if b.w.Buffered() > 0 {
		if err := b.w.Flush(); err != nil {
			return 0, err
		}
	}
	return b.ReadCloser.Read(p)
}

// writerOnly hides bufio.Writer's ReadFrom, which would read a body
// into the buffer that flushingBody flushes.
type writerOnly struct{ io.Writer }
