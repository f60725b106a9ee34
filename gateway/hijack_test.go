package gateway

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session/sessiontest"
)

// TestMessageSentWithTheHandshakeIsRead: a client may send its first
// message in the same packet as its upgrade request; the server read it
// with the request, and the upgraded connection must still see it.
func TestMessageSentWithTheHandshakeIsRead(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{}, nil)
	nc, err := net.Dial("tcp", strings.TrimPrefix(e.http.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET /v1/connect HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" +
		"Sec-WebSocket-Protocol: " + wire.Subprotocol + "\r\nAuthorization: Bearer " + e.token(t, "acme", allScopes...) + "\r\n\r\n"
	ping, _ := json.Marshal(wire.Request{Type: wire.TypePing, Req: "early"})
	if _, err := nc.Write(append([]byte(req), maskedText(ping)...)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	for range 10 {
		m := readServerFrame(t, br)
		if strings.Contains(m, `"early"`) {
			if !strings.Contains(m, `"`+wire.MsgPong+`"`) {
				t.Fatalf("the answer to the early ping is %s", m)
			}
			return
		}
	}
	t.Fatal("no answer to the ping sent with the handshake")
}

// maskedText is a client's text frame of p (RFC 6455 5.2), p under 126
// bytes.
func maskedText(p []byte) []byte {
	key := [4]byte{1, 2, 3, 4}
	f := append([]byte{0x81, 0x80 | byte(len(p))}, key[:]...)
	for i, c := range p {
		f = append(f, c^key[i%4])
	}
	return f
}

// readServerFrame reads one unmasked, unfragmented frame's payload.
func readServerFrame(t *testing.T, r *bufio.Reader) string {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		t.Fatal(err)
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var x [2]byte
		if _, err := io.ReadFull(r, x[:]); err != nil {
			t.Fatal(err)
		}
		n = uint64(binary.BigEndian.Uint16(x[:]))
	case 127:
		var x [8]byte
		if _, err := io.ReadFull(r, x[:]); err != nil {
			t.Fatal(err)
		}
		n = binary.BigEndian.Uint64(x[:])
	}
	p := make([]byte, min(n, 1<<20))
	if _, err := io.ReadFull(r, p); err != nil {
		t.Fatal(err)
	}
	return string(p)
}

// TestLingerIsBounded: linger reads what the client still sends until it
// closes, but never more than lingerBytes, nor for longer than lingerTime.
func TestLingerIsBounded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		send     int
		close    bool
		wantRead int
		wantTook time.Duration // on the bubble's clock
	}{
		{"the client closes", 64 << 10, true, 64 << 10, 0},
		{"more than lingerBytes", lingerBytes + 64<<10, false, lingerBytes, 0},
		{"the client sends nothing and stays", 0, false, 0, lingerTime},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				server, client := net.Pipe()
				defer client.Close()
				counted := &countingConn{Conn: server}
				go func() {
					client.Write(make([]byte, tc.send)) // returns once read, or when server closes
					if tc.close {
						client.Close()
					}
				}()
				start := time.Now()
				linger(counted)
				took := time.Since(start)
				server.Close()
				if counted.n != tc.wantRead {
					t.Errorf("read %d bytes, want %d", counted.n, tc.wantRead)
				}
				if took != tc.wantTook {
					t.Errorf("lingered %v, want %v", took, tc.wantTook)
				}
			})
		})
	}
	linger(nil) // a connection linger cannot reach: nothing to do
}

// countingConn counts the bytes read from it.
type countingConn struct {
	net.Conn
	n int
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n += n
	return n, err
}
