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

// What linger reads at most, and for how long, of a refused message.
const (
	lingerBytes = 1 << 20
	lingerTime  = 2 * time.Second
)

// smallBuffers is a ResponseWriter whose Hijack hands out a smaller write
// buffer than net/http's: 3 KiB less per idle connection. A plain TCP or
// unix connection gets a writer that never blocks (nbConn), which Hijack
// keeps in nb; other connections keep blocking writes and nb nil.
type smallBuffers struct {
	http.ResponseWriter
	writeTimeout time.Duration // the backlog's (nbConn)
	nb           *nbConn
	conn         net.Conn      // the hijacked connection, for linger
	br           *bufio.Reader // the WebSocket's reader of it
}

// Hijack takes over the connection. What the client already sent (net/http
// read it into its buffer) goes to the non-blocking connection, which
// hands it out first, or else into the new reader's buffer, where
// websocket.Accept looks for it.
func (w *smallBuffers) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	early, _ := brw.Reader.Peek(brw.Reader.Buffered())
	var r *bufio.Reader
	if nb, ok := newNBConn(nc, w.writeTimeout); ok {
		w.nb, nc = nb, nb
		nb.unread(early)
		r = bufio.NewReaderSize(nc, nbReadBuffer)
	} else {
		r = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(slices.Clone(early)), nc), max(upgradeReadBuffer, len(early)))
		if len(early) > 0 {
			r.Peek(len(early)) // from the copy alone: it cannot block
		}
	}
	w.conn, w.br = nc, r
	if err := brw.Writer.Flush(); err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, bufio.NewReadWriter(r, bufio.NewWriterSize(nc, upgradeWriteBuffer)), nil
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *smallBuffers) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// linger reads and drops what the client still sends on nc, until it
// closes or lingerBytes or lingerTime passed. A message over the read
// limit is refused after its first bytes (the library writes the 1009
// then), and closing the socket with the rest of it unread would reset
// the connection: the client's write of the message would fail, and its
// read of the 1009 might.
func linger(nc net.Conn) {
	if nc == nil {
		return
	}
	nc.SetReadDeadline(time.Now().Add(lingerTime))
	io.Copy(io.Discard, io.LimitReader(nc, lingerBytes))
}
