package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"slices"
)

// Buffer sizes of an upgraded connection. net/http hands a hijacked
// connection a 4 KiB reader and a 4 KiB writer, which the WebSocket keeps
// for the connection's life. Input frames are mostly keystrokes and echo
// frames a few bytes; a larger read or write bypasses a buffer anyway,
// at the cost of one more system call for frames between these sizes
// and 4 KiB.
const (
	upgradeReadBuffer  = 512
	upgradeWriteBuffer = 1 << 10
)

// smallBuffers is a ResponseWriter whose Hijack hands out smaller buffers
// than net/http's: it saves about 6.5 KiB per idle connection.
type smallBuffers struct {
	http.ResponseWriter
}

// Hijack takes over the connection and moves what the client already
// sent (net/http read it into its buffer) into the new reader's buffer,
// where websocket.Accept looks for it.
func (w smallBuffers) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
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
func (w smallBuffers) Unwrap() http.ResponseWriter { return w.ResponseWriter }
