package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"slices"
	"time"
)

// Buffer sizes of an upgraded connection. net/http hands a hijacked
// connection a 4 KiB reader and a 4 KiB writer, which the WebSocket keeps
// for the connection's life. Echo frames are a few bytes, and a larger
// write bypasses the buffer anyway, at the cost of one more system call
// for frames between 1 and 4 KiB. The reader stays at 4 KiB: with 512 B,
// a message over the read limit was refused after its first bytes, and
// closing with the rest unread reset the connection before the client
// saw its 1009 (TestMetricsLimitRefusals, 1 run in 8 under -race).
const (
	upgradeReadBuffer  = 4 << 10
	upgradeWriteBuffer = 1 << 10
)

// smallBuffers is a ResponseWriter whose Hijack hands out a smaller write
// buffer than net/http's: 3 KiB less per idle connection. A plain TCP or
// unix connection gets a writer that never blocks (nbConn), which Hijack
// keeps in nb; other connections keep blocking writes and nb nil.
type smallBuffers struct {
	http.ResponseWriter
	writeTimeout time.Duration // the backlog's (nbConn)
	nb           *nbConn
}

// Hijack takes over the connection and moves what the client already
// sent (net/http read it into its buffer) into the new reader's buffer,
// where websocket.Accept looks for it.
func (w *smallBuffers) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if nb, ok := newNBConn(nc, w.writeTimeout); ok {
		w.nb, nc = nb, nb
	}
	early, _ := brw.Reader.Peek(brw.Reader.Buffered())
	r := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(slices.Clone(early)), nc), max(upgradeReadBuffer, len(early)))
	if len(early) > 0 {
		r.Peek(len(early)) // from the copy alone: it cannot block
	}
	if err := brw.Writer.Flush(); err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, bufio.NewReadWriter(r, bufio.NewWriterSize(nc, upgradeWriteBuffer)), nil
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *smallBuffers) Unwrap() http.ResponseWriter { return w.ResponseWriter }
