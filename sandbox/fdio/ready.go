//go:build linux

package fdio

import (
	"errors"
	"sync"
	"syscall"
)

// ReadReady reads from the non-blocking descriptor behind rc into
// (*buf)[from:to] of a buffer it takes from pool only once the
// descriptor has bytes: a reader that waits holds no buffer (it waits
// through the runtime's poller). It returns the buffer, for the caller
// to put back, and the bytes read: 0 is the end of a stream, or an empty
// datagram. On an error it keeps no buffer. pool holds *[]byte of at
// least to bytes.
func ReadReady(rc syscall.RawConn, pool *sync.Pool, from, to int) (*[]byte, int, error) {
	var buf *[]byte
	var n int
	var rerr error
	err := rc.Read(func(fd uintptr) bool {
		if buf == nil {
			buf = pool.Get().(*[]byte)
		}
		for {
			n, rerr = Read(int(fd), (*buf)[from:to])
			if !errors.Is(rerr, syscall.EINTR) {
				break
			}
		}
		if errors.Is(rerr, syscall.EAGAIN) {
			pool.Put(buf) // wait holding nothing
			buf = nil
			return false
		}
		return true
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		if buf != nil {
			pool.Put(buf)
		}
		return nil, 0, err
	}
	return buf, n, nil
}
