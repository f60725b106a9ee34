//go:build linux

package sandbox

import (
	"bytes"
	"io"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// copy drains r into w until end of file, on a goroutine owned by the
// process; Wait waits for it. A PTY master reports EIO once every slave
// is closed: that is its end of file.
func (p *Process) copy(r *os.File, w io.Writer, capture bool) {
	if w == nil {
		w = io.Discard
	}
	if capture {
		w = io.MultiWriter(p.head, w)
	}
	p.copies.Add(1)
	go func() {
		defer p.copies.Done()
		defer r.Close()
		copyOutput(r, w)
	}()
}

// copyOutput drains r into w until end of file or error. Its buffer
// starts small, so an idle execution costs little, and doubles up to
// maxReadBuf while reads fill it.
func copyOutput(r *os.File, w io.Writer) {
	raw, rawErr := r.SyscallConn()
	buf := make([]byte, minReadBuf)
	for {
		n, err := r.Read(buf)
		if rawErr == nil && err == nil && n >= burstMin {
			n = readBurst(raw, buf, n)
		}
		if n > 0 {
			w.Write(buf[:n])
		}
		if err != nil {
			return
		}
		if n == len(buf) && len(buf) < maxReadBuf {
			buf = make([]byte, 2*len(buf))
		}
	}
}

// Output read buffer bounds.
const (
	minReadBuf = 4 << 10
	maxReadBuf = 32 << 10
)

// burstMin is the read size from which the copier looks for more data
// already waiting: a keystroke's echo goes out at once, a flood of output
// goes out in large events instead of the terminal's 4 KiB reads.
const burstMin = 1024

// readBurst appends to buf[:n] whatever can be read without waiting. A
// failed or empty read is left for the next blocking read to report.
func readBurst(raw syscall.RawConn, buf []byte, n int) int {
	for n < len(buf) {
		var m int
		var err error
		raw.Read(func(fd uintptr) bool {
			m, err = unix.Read(int(fd), buf[n:])
			return true // never wait
		})
		if err != nil || m <= 0 {
			return n
		}
		n += m
		if m < burstMin {
			return n // drained: wait in the poller rather than spin on small reads
		}
	}
	return n
}

// headCapture keeps the first bytes of output, where bwrap prints its
// setup error.
type headCapture struct {
	mu  sync.Mutex
	buf []byte
}

const headSize = 2048

func (h *headCapture) Write(b []byte) (int, error) {
	h.mu.Lock()
	if room := headSize - len(h.buf); room > 0 {
		h.buf = append(h.buf, b[:min(room, len(b))]...)
	}
	h.mu.Unlock()
	return len(b), nil
}

// setupPrefixes start the error lines of bwrap and of the init, which
// writes to its output only when its control socket failed.
var setupPrefixes = []string{"bwrap: ", "termgate-init: "}

// setupMessage returns the error line of bwrap or of the init, if the
// output holds one.
func (h *headCapture) setupMessage() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, line := range bytes.Split(h.buf, []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		for _, prefix := range setupPrefixes {
			if bytes.HasPrefix(line, []byte(prefix)) {
				return string(line)
			}
		}
	}
	return ""
}
