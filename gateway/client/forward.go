package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/wire"
)

// ErrStreamLost ends a forward stream whose connection broke: the
// client reconnects, but a stream is not resumed (open a new one).
var ErrStreamLost = errors.New("client: the forward stream's connection broke")

// forwardAckEvery is how many delivered bytes the client acknowledges
// at once; it acknowledges sooner when it has read all it holds.
const forwardAckEvery = 128 << 10

// forwardFrameMax bounds the bytes of one forward frame the client
// sends.
const forwardFrameMax = 128 << 10

// Forward opens a stream to port on the loopback of execution id, as
// a connection (see gateway/PROTOCOL.md, Ports); its token needs the
// exec:forward scope. The stream lives on the client's current
// connection: when that breaks, the stream ends with ErrStreamLost,
// and later calls open streams on the next connection.
func (c *Client) Forward(ctx context.Context, id string, port int) (*ForwardConn, error) {
	fc := &ForwardConn{c: c, id: id, port: port, wake: make(chan struct{})}
	m, err := c.request(ctx, wire.Request{Type: wire.TypeForward, ID: id, Port: port}, func(m wire.Message) {
		if m.Type != wire.MsgForwarded {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		fc.stream, fc.ws, fc.credit = m.Stream, c.ws, m.Window
		if c.streams == nil {
			c.streams = map[uint32]*ForwardConn{}
		}
		c.streams[m.Stream] = fc
	})
	if err != nil {
		return nil, err
	}
	if m.Type != wire.MsgForwarded {
		return nil, fmt.Errorf("client: forward answered %q", m.Type)
	}
	return fc, nil
}

// ForwardConn is a forward stream: a net.Conn whose bytes reach a port
// in an execution's sandbox. CloseWrite ends what it sends (the program
// reads EOF); Close resets what is not finished. Its methods are safe
// for concurrent use.
type ForwardConn struct {
	c      *Client
	id     string
	port   int
	stream uint32
	ws     *websocket.Conn

	mu        sync.Mutex
	buf       []heldFrame // received, not read yet
	unacked   int         // read, not acknowledged yet
	credit    int         // bytes the client may still send
	eof       bool        // the program ended what it sends
	err       error       // the stream's end, for reads and writes
	wclosed   bool        // CloseWrite or Close
	closed    bool
	wake      chan struct{} // closed and replaced when anything changes
	rdeadline time.Time
	wdeadline time.Time
}

// changed wakes every waiter. Called with f.mu held.
func (f *ForwardConn) changed() {
	close(f.wake)
	f.wake = make(chan struct{})
}

// wait waits, f.mu held, until something changes or deadline passes;
// false when it passed.
func (f *ForwardConn) wait(deadline time.Time) bool {
	w := f.wake
	f.mu.Unlock()
	defer f.mu.Lock()
	if deadline.IsZero() {
		<-w
		return true
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-w:
		return true
	case <-t.C:
		return false
	}
}

// Read reads the program's bytes; io.EOF once it ended what it sends.
// What it read is acknowledged to the server (credit) every 128 KiB,
// and whenever it has read all it holds.
func (f *ForwardConn) Read(b []byte) (int, error) {
	f.mu.Lock()
	if err := f.awaitBytes(); err != nil {
		f.mu.Unlock()
		return 0, err
	}
	n := copy(b, f.buf[0].data)
	if f.buf[0].data = f.buf[0].data[n:]; len(f.buf[0].data) == 0 {
		f.buf[0].data = nil
		messageBuffers.Put(f.pop().held)
	}
	f.readDone(n)
	return n, nil
}

// WriteTo writes the program's bytes to w until it ends what it sends
// (nil then), acknowledging them as Read does: io.Copy from the stream
// uses it, and saves a copy of each byte.
func (f *ForwardConn) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		f.mu.Lock()
		if err := f.awaitBytes(); err != nil {
			f.mu.Unlock()
			if err == io.EOF {
				err = nil
			}
			return total, err
		}
		fr := f.pop()
		f.mu.Unlock()
		n, err := w.Write(fr.data)
		messageBuffers.Put(fr.held)
		total += int64(n)
		f.mu.Lock()
		f.readDone(n)
		if err != nil {
			return total, err
		}
	}
}

// awaitBytes waits, f.mu held, until the stream holds bytes; the error
// Read returns when it never will.
func (f *ForwardConn) awaitBytes() error {
	for len(f.buf) == 0 {
		switch {
		case f.closed:
			return net.ErrClosed
		case f.eof:
			return io.EOF
		case f.err != nil:
			return f.err
		case !f.rdeadline.IsZero() && !time.Now().Before(f.rdeadline):
			return os.ErrDeadlineExceeded
		}
		f.wait(f.rdeadline)
	}
	return nil
}

// pop takes the first frame held. Called with f.mu held.
func (f *ForwardConn) pop() heldFrame {
	fr := f.buf[0]
	f.buf[0] = heldFrame{}
	if f.buf = f.buf[1:]; len(f.buf) == 0 {
		f.buf = nil
	}
	return fr
}

// readDone counts n bytes read, and acknowledges what was read every
// forwardAckEvery bytes and when nothing more is held. Called with f.mu
// held, which it releases.
func (f *ForwardConn) readDone(n int) {
	f.unacked += n
	ack := 0
	if f.unacked >= forwardAckEvery || len(f.buf) == 0 {
		ack, f.unacked = f.unacked, 0
	}
	f.mu.Unlock()
	if ack > 0 {
		f.send(wire.Request{Type: wire.TypeForwardAck, Stream: f.stream, Bytes: uint64(ack)})
	}
}

// Write sends b to the program, within the server's credit.
func (f *ForwardConn) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		f.mu.Lock()
		for f.credit == 0 && f.usable() == nil {
			if !f.wdeadline.IsZero() && !time.Now().Before(f.wdeadline) {
				f.mu.Unlock()
				return written, os.ErrDeadlineExceeded
			}
			f.wait(f.wdeadline)
		}
		if err := f.usable(); err != nil {
			f.mu.Unlock()
			return written, err
		}
		n := min(len(b), f.credit, forwardFrameMax)
		f.credit -= n
		ws := f.ws
		f.mu.Unlock()
		fb := messageBuffers.Get().(*bytes.Buffer)
		fb.Reset()
		fb.Grow(wire.ForwardHeaderLen + n)
		err := ws.Write(context.Background(), websocket.MessageBinary, wire.AppendForward(fb.AvailableBuffer(), f.stream, b[:n]))
		messageBuffers.Put(fb)
		if err != nil {
			return written, fmt.Errorf("%w: %w", ErrStreamLost, err)
		}
		written += n
		b = b[n:]
	}
	return written, nil
}

// usable is why the stream can send no more, or nil. Called with f.mu
// held.
func (f *ForwardConn) usable() error {
	switch {
	case f.closed:
		return net.ErrClosed
	case f.wclosed:
		return errors.New("client: write after CloseWrite")
	}
	return f.err
}

// CloseWrite ends what the stream sends: the program reads EOF.
func (f *ForwardConn) CloseWrite() error {
	f.mu.Lock()
	if f.wclosed || f.closed {
		f.mu.Unlock()
		return nil
	}
	f.wclosed = true
	f.changed()
	f.mu.Unlock()
	return f.send(wire.Request{Type: wire.TypeForwardClose, Stream: f.stream})
}

// Close ends the stream; one not finished both ways is reset.
func (f *ForwardConn) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	over := f.err != nil
	f.changed()
	f.mu.Unlock()
	if over {
		return nil
	}
	return f.send(wire.Request{Type: wire.TypeForwardClose, Stream: f.stream, Reset: true})
}

// send writes a control request of the stream on its connection.
func (f *ForwardConn) send(r wire.Request) error {
	b, _ := json.Marshal(r)
	ctx, cancel := context.WithTimeout(f.c.ctx, 10*time.Second)
	defer cancel()
	return f.ws.Write(ctx, websocket.MessageText, b)
}

// LocalAddr and RemoteAddr name the stream: the execution and its port.
func (f *ForwardConn) LocalAddr() net.Addr  { return forwardAddr("termgate") }
func (f *ForwardConn) RemoteAddr() net.Addr { return forwardAddr(fmt.Sprintf("%s:%d", f.id, f.port)) }

// SetDeadline sets the read and write deadlines.
func (f *ForwardConn) SetDeadline(t time.Time) error {
	f.SetReadDeadline(t)
	return f.SetWriteDeadline(t)
}

// SetReadDeadline bounds the Reads waiting now and later.
func (f *ForwardConn) SetReadDeadline(t time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rdeadline = t
	f.changed()
	return nil
}

// SetWriteDeadline bounds the Writes waiting for credit now and later.
func (f *ForwardConn) SetWriteDeadline(t time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wdeadline = t
	f.changed()
	return nil
}

type forwardAddr string

func (forwardAddr) Network() string  { return "termgate-forward" }
func (a forwardAddr) String() string { return string(a) }

// heldFrame is a received frame's bytes not read yet, and the read
// loop's buffer they lie in, given back once they are read.
type heldFrame struct {
	data []byte
	held *bytes.Buffer
}

// received takes a frame of the stream, data within the read loop's
// buffer held; it reports whether it kept the buffer.
func (f *ForwardConn) received(data []byte, held *bytes.Buffer) bool {
	if len(data) == 0 {
		return false
	}
	f.mu.Lock()
	f.buf = append(f.buf, heldFrame{data, held})
	f.changed()
	f.mu.Unlock()
	return true
}

// message takes a forward-ack, forward-eof or forward-end of the stream.
func (f *ForwardConn) message(m wire.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch m.Type {
	case wire.MsgForwardAck:
		f.credit += int(m.Bytes)
	case wire.MsgForwardEOF:
		f.eof = true
	case wire.MsgForwardEnd:
		if m.Reason == wire.ForwardClosed {
			f.eof = true
			f.err = io.EOF
		} else {
			f.err = fmt.Errorf("client: forward stream to port %d of %s ended: %s", f.port, f.id, m.Reason)
		}
	}
	f.changed()
}

// lost ends the stream with the connection.
func (f *ForwardConn) lost() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = ErrStreamLost
	}
	f.changed()
}

// forwardFrame routes a forward frame, b within the read loop's buffer
// held, to its stream; it reports whether the stream kept the buffer.
func (c *Client) forwardFrame(b []byte, held *bytes.Buffer) (bool, error) {
	id, data, err := wire.DecodeForward(b)
	if err != nil {
		return false, err
	}
	if f := c.stream(id); f != nil {
		return f.received(data, held), nil
	}
	return false, nil
}

// forwardMessage routes a stream's message; forward-end forgets it.
func (c *Client) forwardMessage(m wire.Message) {
	f := c.stream(m.Stream)
	if f == nil {
		return
	}
	if m.Type == wire.MsgForwardEnd {
		c.mu.Lock()
		delete(c.streams, m.Stream)
		c.mu.Unlock()
	}
	f.message(m)
}

// stream returns a stream of the current connection.
func (c *Client) stream(id uint32) *ForwardConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

// loseStreams ends every stream of the connection that broke. Called
// with c.mu held.
func (c *Client) loseStreams() {
	for id, f := range c.streams {
		delete(c.streams, id)
		go f.lost()
	}
}
