package proxy

import (
	"io"
	"net"
	"sync"
	"syscall"

	"github.com/termgate/termgate/sandbox/fdio"
)

// splice copies a to b and b to a until both ways ended, and returns
// the bytes each way. A way that ends cleanly half-closes its
// destination (CloseWrite), so the other end reads its end of stream
// while the other way goes on, as git and TLS expect; a way that fails
// closes both connections, which ends the other way too.
func splice(a, b net.Conn) (ab, ba int64) {
	done := make(chan int64, 1)
	go func() { done <- copyHalf(b, a) }() // owned by splice, ends with a's end
	ba = copyHalf(a, b)
	ab = <-done
	return ab, ba
}

// copyHalf copies src to dst until src's end, then half-closes dst.
func copyHalf(dst, src net.Conn) int64 {
	n, err := copyConn(dst, src)
	if err == nil {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			return n
		}
	}
	dst.Close()
	src.Close()
	return n
}

// copyConn copies src to dst. Between two TCP connections it waits for
// src to be readable holding no buffer, then moves what is there with a
// pooled copyBufferSize buffer until src would block, and gives the
// buffer back: an idle tunnel holds none, a busy one copies in large
// pieces. (splice(2) through a pipe also holds nothing, but on loopback
// it moved 64% of a direct download's rate where this moves 90%: see
// docs/performance.md.) Other pairs take a pooled buffer for the copy's
// life.
func copyConn(dst, src net.Conn) (int64, error) {
	if s, ok := src.(*net.TCPConn); ok {
		if rc, err := s.SyscallConn(); err == nil {
			return copyReady(dst, rc)
		}
	}
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	// The wrappers hide ReadFrom and WriteTo, which would allocate a
	// buffer of their own.
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *bp)
}

// copyReady copies from the socket src to dst until src's end, taking a
// buffer only while src has bytes to give.
func copyReady(dst io.Writer, src syscall.RawConn) (int64, error) {
	var total int64
	for {
		buf, n, err := fdio.ReadReady(src, &copyBuffers, 0, copyBufferSize)
		if err == nil && n > 0 {
			var w int
			w, err = dst.Write((*buf)[:n])
			total += int64(w)
		}
		if buf != nil {
			copyBuffers.Put(buf)
		}
		switch {
		case err != nil:
			return total, err
		case n == 0:
			return total, nil // the end of src's stream
		}
	}
}

// copyBufferSize is a copy's buffer while bytes flow: large, so a busy
// tunnel makes few system calls, and given back whenever the source has
// nothing to read.
const copyBufferSize = 256 << 10

// copyBuffers holds the copies' buffers.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}
