package proxy

import (
	"io"
	"net"
	"sync"
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

// copyConn copies src to dst. Between two TCP connections io.Copy uses
// splice(2) on Linux: the bytes stay in the kernel and an idle
// connection holds no user-space buffer. Other pairs take a pooled
// 32 KiB buffer for the copy's life.
func copyConn(dst, src net.Conn) (int64, error) {
	_, tcpDst := dst.(*net.TCPConn)
	_, tcpSrc := src.(*net.TCPConn)
	if tcpDst && tcpSrc {
		return io.Copy(dst, src)
	}
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	// The wrappers hide ReadFrom and WriteTo, which would allocate a
	// buffer of their own.
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *bp)
}

// copyBuffers holds the 32 KiB buffers of copies that cannot splice.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
