package gateway

import (
	"net"
	"net/http"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// dialSmall dials like dial with a 4 KiB receive buffer, for a client
// that stops reading: the server's writes to it block soon.
func (e *testEnv) dialSmall(t *testing.T, token string) *client {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
		})
	}}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	t.Cleanup(hc.CloseIdleConnections)
	opts := &websocket.DialOptions{Subprotocols: []string{wire.Subprotocol}, HTTPClient: hc,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}}
	c, resp, err := e.dialRaw(token, opts)
	if err != nil {
		t.Fatalf("dial: %v (status %d)", err, status(resp))
	}
	return c
}

// TestClosedConnectionReleasesItsHold: an acknowledging driver that never
// acks and stops reading, while its program writes more than the ring
// holds, lets go of its hold when its connection ends, however it ends,
// and the output another writer watches goes on.
func TestClosedConnectionReleasesItsHold(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		tweak func(*Config)
		leave func(t *testing.T, c *client, channel uint32)
	}{
		{"tcp close", nil, func(t *testing.T, c *client, _ uint32) { c.ws.CloseNow() }},
		{"close frame", nil, func(t *testing.T, c *client, _ uint32) { c.close() }},
		{"detach first", nil, func(t *testing.T, c *client, channel uint32) {
			c.send(t, wire.Request{Type: wire.TypeDetach, Channel: channel})
			c.ws.CloseNow()
		}},
		{"heartbeat", func(c *Config) { c.PingInterval, c.PongTimeout = 200*time.Millisecond, 300*time.Millisecond }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, func(c *Config) {
				c.Ring = replay.Config{MaxBytes: 256 << 10, MaxEvents: 1024}
				if tc.tweak != nil {
					tc.tweak(c)
				}
			})
			tok := e.token(t, "acme", allScopes...)
			c := e.dialSmall(t, tok)
			defer c.ws.CloseNow()
			c.send(t, wire.Request{Type: wire.TypeStart, ID: "flood", Command: "/bin/sh",
				Args: []string{"-c", "seq 1 3000000"}, PTY: &wire.Size{Rows: 24, Cols: 80}, Attach: true, Ack: true})
			att, _ := c.expect(t, wire.MsgAttached)
			w := watch(t, e, tok, "flood", false)
			// The driver reads no more: its hold fills the ring.
			if !sandboxtest.Eventually(t, 20*time.Second, func() bool {
				st, _ := e.sup.RingStats("acme", "flood")
				return st.Holds == 2 && st.HeldBytes >= 128<<10
			}) {
				st, _ := e.sup.RingStats("acme", "flood")
				t.Fatalf("the driver's hold never filled the ring: %+v", st)
			}
			if tc.leave != nil {
				tc.leave(t, c, att.Channel)
			}
			if !sandboxtest.Eventually(t, 20*time.Second, func() bool {
				st, _ := e.sup.RingStats("acme", "flood")
				return st.Holds <= 1
			}) {
				st, _ := e.sup.RingStats("acme", "flood")
				t.Fatalf("the driver's hold outlived its connection: %+v\n%s", st, goroutines())
			}
			info, _ := e.sup.Get("acme", "flood")
			if !sandboxtest.Eventually(t, 20*time.Second, func() bool {
				_, seen := w.state()
				return seen > info.LastSeq+10
			}) {
				t.Fatal("the watcher saw no more output after the driver left")
			}
		})
	}
}

// goroutines is every goroutine's stack, for a failure's message.
func goroutines() []byte {
	b := make([]byte, 1<<20)
	return b[:runtime.Stack(b, true)]
}
