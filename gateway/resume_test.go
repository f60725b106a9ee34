package gateway

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/termgate/termgate/gateway/gatewaytest"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
)

// TestResumeAcrossCutConnections cuts the TCP connection at random points
// while seq 1 200000 streams; the client reattaches after its last
// sequence each time, and its transcript must equal the output exactly.
func TestResumeAcrossCutConnections(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.Ring = replay.Config{MaxBytes: 8 << 20, MaxEvents: 1 << 16} })
	proxy := gatewaytest.NewCuttingProxy(t, strings.TrimPrefix(e.http.URL, "http://"), gatewaytest.ProxyConfig{MinBudget: 16 << 10, Spread: 256 << 10, Seed: 1})
	tok := e.token(t, "acme", allScopes...)
	url := "ws://" + proxy.Addr() + "/v1/connect"

	c := e.dial(t, tok)
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "seq", Command: "/bin/sh", Args: []string{"-c", "seq 1 200000"}})
	c.expect(t, wire.MsgStarted)
	c.close()

	// A client of the protocol before acknowledgements: served free
	// running, and resuming from its last sequence every time.
	f := newFollower("seq")
	f.old = true
	f.run(t, url, tok, 2000)
	if f.lost != 0 || !bytes.Equal(f.sum.Sum(nil), sha(seqLines(200000))) {
		t.Fatalf("transcript differs: %d bytes, lost %d, want %d exactly", f.got, f.lost, len(seqLines(200000)))
	}
	if cuts := proxy.Cuts(); cuts < 3 {
		t.Fatalf("only %d connections were cut: the test did not exercise resume", cuts)
	} else {
		t.Logf("%d cuts", cuts)
	}
}

func seqLines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}
