package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/termgate/termgate/sandbox/fdio"
)

// The bounds of ServeUDP.
const (
	// DefaultUDPIdleTimeout ends a UDP flow no datagram crossed, either
	// way, for this long (Server.UDPIdleTimeout). It is below conntrack's shortest hold of a UDP entry
	// (30 s), so a flow never outlives the entry that names its
	// destination: a program's socket that sends elsewhere after that
	// starts a new flow.
	DefaultUDPIdleTimeout = 25 * time.Second
	// MaxUDPFlows bounds the flows of one ServeUDP at once; a datagram
	// that would start one more is dropped, and its Record says so.
	MaxUDPFlows = 128
	// udpQueue bounds the datagrams of a flow waiting to be sent to its
	// target (while it is being connected); one more is dropped and
	// counted in the flow's Record.
	udpQueue = 32
	// maxDatagram is the largest UDP payload: every read is of this, so
	// that none is cut.
	maxDatagram = 65535
)

// UDP is the Record Protocol of a UDP flow: the datagrams between one
// program's socket and one destination, relayed by ServeUDP.
const UDP Protocol = "udp"

// UDPDialer is implemented by a Dialer that relays UDP too: DialUDP
// connects a UDP socket to host and port, or returns a *Refused, as
// Dial does for TCP. A Dialer without it refuses every flow.
type UDPDialer interface {
	DialUDP(ctx context.Context, host string, port uint16) (net.Conn, error)
}

// PacketConn is the socket ServeUDP serves: one that a sandbox's
// redirect sends the program's UDP to outside addresses, and that tells
// where each datagram was going (sandbox.RedirectedConn). An answer
// written to a datagram's sender reaches the program as from where it
// was going.
type PacketConn interface {
	ReadFromUDPAddrPort(b []byte) (int, netip.AddrPort, error)
	WriteToUDPAddrPort(b []byte, addr netip.AddrPort) (int, error)
	OriginalDst(from netip.AddrPort) (netip.AddrPort, error)
	Close() error
}

// udpRelay is one ServeUDP: its socket and its flows, by the program's
// socket.
type udpRelay struct {
	s    *Server
	pc   PacketConn
	stop chan struct{} // closed when ServeUDP returns: every flow ends

	mu    sync.Mutex
	flows map[netip.AddrPort]*udpFlow
}

// udpFlow is one program socket's datagrams to one destination. A flow
// that was refused, or whose target could not be connected, stays as a
// marker that drops its socket's datagrams without asking again, until
// it idles or room is needed.
type udpFlow struct {
	from netip.AddrPort
	host string
	port uint16
	in   chan []byte // to the target

	// Under udpRelay.mu:
	last     time.Time // the last datagram either way
	refused  bool      // refused or failed: a marker
	up, down int64     // bytes relayed
	dropped  int64     // bytes the queue had no room for
}

// ServeUDP relays the datagrams that a sandbox's redirect sends to pc,
// until Close, as ServeTransparent does connections: each program
// socket's datagrams are a flow to the destination of its first, decided
// once by the Dialer (which must be a UDPDialer; the name a synthetic
// address stands for as Names says) and ended after the Server's UDPIdleTimeout;
// answers go back through pc. A refused or failed flow drops its
// datagrams: UDP has no refusal to give, so the program learns only by
// its timeouts, and Done by the Record. It returns ErrClosed after
// Close, or pc's error; pc is closed when it returns.
func (s *Server) ServeUDP(pc PacketConn) error {
	closer := packetCloser{pc}
	if !s.addListener(closer) {
		pc.Close()
		return ErrClosed
	}
	defer s.removeListener(closer)
	r := &udpRelay{s: s, pc: pc, stop: make(chan struct{}), flows: map[netip.AddrPort]*udpFlow{}}
	defer close(r.stop)
	buf := make([]byte, maxDatagram)
	for {
		n, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if s.isClosed() {
				return ErrClosed
			}
			return err
		}
		r.datagram(from, buf[:n])
	}
}

// packetCloser lets the Server's listener set close a PacketConn.
type packetCloser struct{ PacketConn }

func (packetCloser) Accept() (net.Conn, error) { return nil, errors.ErrUnsupported }
func (packetCloser) Addr() net.Addr            { return nil }

// datagram passes b, from a program's socket, to its flow, starting one.
func (r *udpRelay) datagram(from netip.AddrPort, b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.flows[from]
	if f != nil && f.refused && time.Since(f.last) >= r.s.udpIdleTimeout() {
		delete(r.flows, from) // decided again: the policy may have changed
		f = nil
	}
	if f == nil {
		if f = r.start(from, len(b)); f == nil {
			return
		}
	}
	f.last = time.Now()
	if f.refused {
		return
	}
	select {
	case f.in <- append([]byte(nil), b...):
		f.up += int64(len(b))
	default:
		f.dropped += int64(len(b))
	}
}

// start asks where from's datagram of size bytes was going and starts
// its flow; nil when it is not to be relayed. Called with r.mu held.
func (r *udpRelay) start(from netip.AddrPort, size int) *udpFlow {
	dst, err := r.pc.OriginalDst(from)
	if err != nil {
		r.s.record(Record{Protocol: UDP, Err: err, Dropped: int64(size)})
		return nil
	}
	f := &udpFlow{from: from, host: dst.Addr().String(), port: dst.Port()}
	if len(r.flows) >= MaxUDPFlows {
		r.sweep()
	}
	if len(r.flows) >= MaxUDPFlows {
		r.s.record(Record{Protocol: UDP, Host: f.host, Port: f.port, Err: ErrBusy, Dropped: int64(size)})
		return nil
	}
	name, fake := r.s.names(dst.Addr())
	switch {
	case fake && name == "":
		reason := f.host + " is an address termgate's DNS gave out for a name it no longer holds: look the name up again"
		if rf, ok := r.s.Dialer.(Refuser); ok {
			rf.Refuse("udp", f.host, f.port, reason)
		}
		r.s.record(Record{Protocol: UDP, Host: f.host, Port: f.port, Refused: reason})
		f.refused = true
	case fake:
		f.host = name
	}
	r.flows[from] = f
	if !f.refused {
		f.in = make(chan []byte, udpQueue)
		r.s.wg.Add(1)
		go r.serve(f)
	}
	return f
}

// sweep forgets the markers of refused flows, to make room. Called with
// r.mu held.
func (r *udpRelay) sweep() {
	for from, f := range r.flows {
		if f.refused {
			delete(r.flows, from)
		}
	}
}

// serve connects f's target, sends it f's datagrams, and passes its
// answers back, until f idles or the relay stops.
func (r *udpRelay) serve(f *udpFlow) {
	defer r.s.wg.Done()
	target, err := r.dial(f)
	if err != nil {
		r.mu.Lock()
		f.refused = true
		r.mu.Unlock()
		rec := failed(UDP, f.host, f.port, err)
		rec.Dropped = int64(drain(f.in))
		r.s.record(rec)
		return
	}
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		r.answers(f, target)
	}()
	r.send(f, target)
	r.s.untrack(target) // ends answers
	<-answered
	unsent := int64(drain(f.in)) // queued before the end, never sent
	r.mu.Lock()
	rec := Record{Protocol: UDP, Host: f.host, Port: f.port, Target: target, Up: f.up - unsent, Down: f.down, Dropped: f.dropped + unsent}
	r.mu.Unlock()
	r.s.record(rec)
}

// dial asks the Dialer for f's target.
func (r *udpRelay) dial(f *udpFlow) (net.Conn, error) {
	d, ok := r.s.Dialer.(UDPDialer)
	if !ok {
		return nil, &Refused{Reason: "udp " + net.JoinHostPort(f.host, strconv.Itoa(int(f.port))) + " is refused: this proxy relays no UDP"}
	}
	ctx, cancel := context.WithTimeout(r.s.ctx, r.s.dialTimeout())
	defer cancel()
	c, err := d.DialUDP(ctx, f.host, f.port)
	if err != nil {
		if r.s.ctx.Err() != nil {
			err = ErrClosed
		}
		return nil, err
	}
	if !r.s.track(c) {
		c.Close()
		return nil, ErrClosed
	}
	return c, nil
}

// send writes f's datagrams to target until f idles or the relay stops;
// f is then out of the relay's flows.
func (r *udpRelay) send(f *udpFlow, target net.Conn) {
	idle := time.NewTimer(r.s.udpIdleTimeout())
	defer idle.Stop()
	for {
		select {
		case b := <-f.in:
			target.Write(b) // a refusal by ICMP is the target's answer; the next may pass
		case <-idle.C:
			r.mu.Lock()
			left := r.s.udpIdleTimeout() - time.Since(f.last)
			if left <= 0 {
				delete(r.flows, f.from)
			}
			r.mu.Unlock()
			if left <= 0 {
				return
			}
			idle.Reset(left)
		case <-r.stop:
			r.mu.Lock()
			delete(r.flows, f.from)
			r.mu.Unlock()
			return
		}
	}
}

// answers passes target's datagrams back to f's socket until target is
// closed, holding a buffer only while a datagram is there to read.
func (r *udpRelay) answers(f *udpFlow, target net.Conn) {
	read := readWhole(target)
	for {
		err := read(func(b []byte) {
			_, err := r.pc.WriteToUDPAddrPort(b, f.from)
			r.mu.Lock()
			if err != nil {
				f.dropped += int64(len(b)) // the program's socket is gone or full
			} else {
				f.down += int64(len(b))
				f.last = time.Now()
			}
			r.mu.Unlock()
		})
		if errors.Is(err, syscall.ECONNREFUSED) {
			continue // an ICMP refusal of an earlier datagram
		}
		if err != nil {
			return
		}
	}
}

// readWhole returns a reader of c's datagrams: each call waits for one,
// reads it whole into a pooled buffer taken once it is there, and gives
// it to use before the buffer goes back. A conn without a descriptor
// holds a buffer for its life.
func readWhole(c net.Conn) func(use func([]byte)) error {
	sc, ok := c.(syscall.Conn)
	var rc syscall.RawConn
	if ok {
		var err error
		if rc, err = sc.SyscallConn(); err != nil {
			ok = false
		}
	}
	if !ok {
		buf := make([]byte, maxDatagram)
		return func(use func([]byte)) error {
			n, err := c.Read(buf)
			if err == nil {
				use(buf[:n])
			}
			return err
		}
	}
	return func(use func([]byte)) error {
		buf, n, err := fdio.ReadReady(rc, &datagramBuffers, 0, maxDatagram)
		if err != nil {
			return err
		}
		defer datagramBuffers.Put(buf)
		use((*buf)[:n])
		return nil
	}
}

// datagramBuffers holds the buffers of flows reading an answer.
var datagramBuffers = sync.Pool{New: func() any { b := make([]byte, maxDatagram); return &b }}

func (s *Server) udpIdleTimeout() time.Duration {
	return orDefault(s.UDPIdleTimeout, DefaultUDPIdleTimeout)
}

// drain empties a flow's queue, and returns the bytes it held.
func drain(in chan []byte) int {
	n := 0
	for {
		select {
		case b := <-in:
			n += len(b)
		default:
			return n
		}
	}
}
