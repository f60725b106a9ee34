package gateway

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

func TestRequestAddr(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("fd00::/8")}
	for _, c := range []struct {
		name    string
		trusted []netip.Prefix
		peer    string
		xff     []string
		want    string
	}{
		{"no trusted proxies: the header is ignored", nil, "127.0.0.1:5000", []string{"203.0.113.9"}, "127.0.0.1:5000"},
		{"spoofed header from an untrusted peer", trusted, "198.51.100.7:5000", []string{"203.0.113.9"}, "198.51.100.7:5000"},
		{"trusted peer, one hop", trusted, "127.0.0.1:5000", []string{"203.0.113.9"}, "203.0.113.9"},
		{"trusted peer, no header", trusted, "127.0.0.1:5000", nil, "127.0.0.1:5000"},
		{"trusted peer, empty header", trusted, "127.0.0.1:5000", []string{" "}, "127.0.0.1:5000"},
		{"chain: the right-most untrusted address", trusted, "127.0.0.1:5000", []string{"192.0.2.66, 203.0.113.9, 10.1.2.3"}, "203.0.113.9"},
		{"chain over several header lines", trusted, "127.0.0.1:5000", []string{"192.0.2.66", "203.0.113.9", "10.1.2.3, 10.4.5.6"}, "203.0.113.9"},
		{"a client forging the left of the chain", trusted, "127.0.0.1:5000", []string{"10.9.9.9, 203.0.113.9"}, "203.0.113.9"},
		{"every hop trusted: the left-most", trusted, "127.0.0.1:5000", []string{"10.1.1.1, 10.2.2.2"}, "10.1.1.1"},
		{"garbage stops the walk at the last hop verified", trusted, "127.0.0.1:5000", []string{"203.0.113.9, <script>, 10.1.2.3"}, "10.1.2.3"},
		{"garbage right away: the peer", trusted, "127.0.0.1:5000", []string{"203.0.113.9, unknown"}, "127.0.0.1:5000"},
		{"IPv6 client", trusted, "127.0.0.1:5000", []string{"2001:db8::1"}, "2001:db8::1"},
		{"IPv6 trusted peer", trusted, "[fd00::5]:443", []string{"203.0.113.9"}, "203.0.113.9"},
		{"an address with a port", trusted, "127.0.0.1:5000", []string{"203.0.113.9:4711"}, "203.0.113.9"},
		{"a bracketed IPv6 address with a port", trusted, "127.0.0.1:5000", []string{"[2001:db8::1]:4711"}, "2001:db8::1"},
		{"IPv4-mapped peer matches an IPv4 prefix", trusted, "[::ffff:127.0.0.1]:5000", []string{"203.0.113.9"}, "203.0.113.9"},
		{"IPv4-mapped client shows as IPv4", trusted, "127.0.0.1:5000", []string{"::ffff:203.0.113.9"}, "203.0.113.9"},
		{"unparsable peer", trusted, "@", []string{"203.0.113.9"}, "@"},
	} {
		r := &http.Request{RemoteAddr: c.peer, Header: http.Header{}}
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := requestAddr(r, c.trusted); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestParseTrustedProxies(t *testing.T) {
	t.Parallel()
	got, err := ParseTrustedProxies([]string{"10.0.0.0/8", "127.0.0.1", "fd00::/8", "::1", "192.168.1.7/24"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "127.0.0.1/32", "fd00::/8", "::1/128", "192.168.1.0/24"}
	for i, p := range got {
		if p.String() != want[i] {
			t.Errorf("%d: %s, want %s", i, p, want[i])
		}
	}
	for _, bad := range []string{"", "10.0.0.0/33", "example.com", "10.0.0.0/8 ", "0.0.0.0/0", "::/0"} {
		if _, err := ParseTrustedProxies([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzRequestAddr(f *testing.F) {
	f.Add("127.0.0.1:1", "203.0.113.9, 10.0.0.1")
	f.Add("[::1]:2", "garbage,,")
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	f.Fuzz(func(t *testing.T, peer, xff string) {
		r := &http.Request{RemoteAddr: peer, Header: http.Header{"X-Forwarded-For": {xff}}}
		got := requestAddr(r, trusted)
		if got == peer {
			return
		}
		if _, err := netip.ParseAddr(got); err != nil {
			t.Fatalf("%q, %q: %q is neither the peer nor an address", peer, xff, got)
		}
	})
}

// TestLogsShowTheForwardedClient: a connection's log lines name the
// client X-Forwarded-For names only when the peer is a trusted proxy; a
// client's own header, from an untrusted peer, is ignored.
func TestLogsShowTheForwardedClient(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		trusted string
		want    func(string) bool
	}{
		{"trusted peer", "127.0.0.1/32", func(a string) bool { return a == "203.0.113.9" }},
		{"untrusted peer", "10.0.0.0/8", func(a string) bool { return strings.HasPrefix(a, "127.0.0.1:") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var logs sandboxtest.SyncBuffer
			log := slog.New(slog.NewJSONHandler(&logs, nil))
			e := newEnvSession(t, session.Config{Launcher: &sessiontest.Launcher{}, Logger: log}, func(cfg *Config) {
				cfg.Logger, cfg.TrustedProxies = log, []netip.Prefix{netip.MustParsePrefix(c.trusted)}
			})
			tok := e.token(t, "acme", allScopes...)
			h := http.Header{"Authorization": {"Bearer " + tok}, "X-Forwarded-For": {"203.0.113.9"}}
			cl, resp, err := e.dialRaw(tok, &websocket.DialOptions{Subprotocols: []string{wire.Subprotocol}, HTTPHeader: h})
			if err != nil {
				t.Fatalf("dial: %v (status %d)", err, status(resp))
			}
			cl.send(t, wire.Request{Type: wire.TypeStart, ID: "one", Command: "/bin/sh", Attach: true})
			cl.expect(t, wire.MsgStarted)
			cl.close()
			for _, msg := range []string{"execution started", "disconnected"} {
				var line map[string]any
				sandboxtest.Eventually(t, 10*time.Second, func() bool {
					for _, l := range strings.Split(logs.String(), "\n") {
						if strings.Contains(l, `"msg":"`+msg+`"`) {
							return json.Unmarshal([]byte(l), &line) == nil
						}
					}
					return false
				})
				if a, _ := line["remote_addr"].(string); !c.want(a) {
					t.Errorf("%s line: remote_addr %q (%v)", msg, a, line)
				}
			}
		})
	}
}
