package proxy

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"
)

// socksGreet sends a greeting offering methods and returns the method
// the proxy chose.
func socksGreet(t *testing.T, c net.Conn, methods ...byte) byte {
	t.Helper()
	c.Write(append([]byte{socksVersion, byte(len(methods))}, methods...))
	var reply [2]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil {
		t.Fatalf("greeting: %v", err)
	}
	if reply[0] != socksVersion {
		t.Fatalf("greeting reply %x", reply)
	}
	return reply[1]
}

// socksRequestBytes encodes a request for cmd to host (an address or
// a name) and port.
func socksRequestBytes(cmd byte, host string, port uint16) []byte {
	b := []byte{socksVersion, cmd, 0}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Is4() {
			b = append(b, socksIPv4)
		} else {
			b = append(b, socksIPv6)
		}
		b = append(b, a.AsSlice()...)
	} else {
		b = append(b, socksDomain, byte(len(host)))
		b = append(b, host...)
	}
	return binary.BigEndian.AppendUint16(b, port)
}

// socksAsk greets with no authentication, sends a request and returns
// the reply's code.
func socksAsk(t *testing.T, c net.Conn, request []byte) byte {
	t.Helper()
	if m := socksGreet(t, c, socksNoAuth); m != socksNoAuth {
		t.Fatalf("method %x, want no authentication", m)
	}
	c.Write(request)
	var reply [10]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil {
		t.Fatalf("reply: %v", err)
	}
	if !bytes.Equal(reply[2:], []byte{0, socksIPv4, 0, 0, 0, 0, 0, 0}) {
		t.Errorf("reply %x: want the bound address 0.0.0.0:0", reply)
	}
	return reply[1]
}

// TestSOCKSReplies: every reply a SOCKS5 client can get, and a working
// tunnel that half-closes.
func TestSOCKSReplies(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(s *Server) { s.DialTimeout = 200 * time.Millisecond })
	echoHost, echoPortText, _ := net.SplitHostPort(f.echo)
	echoPort64, _ := strconv.ParseUint(echoPortText, 10, 16)
	echoPort := uint16(echoPort64)
	closed, _ := strconv.ParseUint(closedPort(t), 10, 16)
	for _, tc := range []struct {
		name    string
		request []byte
		reply   byte
	}{
		{"refused name", socksRequestBytes(socksConnect, blockedHost, 443), socksNotAllowed},
		{"refused IPv6", socksRequestBytes(socksConnect, "::1", 443), socksNotAllowed},
		{"bind", socksRequestBytes(0x02, echoHost, echoPort), socksCommandUnsupported},
		{"udp associate", socksRequestBytes(0x03, echoHost, echoPort), socksCommandUnsupported},
		{"address type", []byte{socksVersion, socksConnect, 0, 0x09, 1, 2, 3, 4, 0, 80}, socksAddressUnsupported},
		{"empty name", socksRequestBytes(socksConnect, "", 80), socksHostUnreachable},
		{"control byte in name", socksRequestBytes(socksConnect, "a\nb", 80), socksHostUnreachable},
		{"connection refused", socksRequestBytes(socksConnect, "127.0.0.2", uint16(closed)), socksConnectionRefused},
		{"host unreachable", socksRequestBytes(socksConnect, unreachHost, 80), socksHostUnreachable},
		{"timed out", socksRequestBytes(socksConnect, slowHost, 80), socksTTLExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := f.dial(t)
			if got := socksAsk(t, c, tc.request); got != tc.reply {
				t.Errorf("reply %#x, want %#x", got, tc.reply)
			}
			if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
				t.Errorf("after the reply: %d bytes, %v; want the connection's end", n, err)
			}
		})
	}
	t.Run("no acceptable method", func(t *testing.T) {
		t.Parallel()
		if m := socksGreet(t, f.dial(t), 0x02, 0x80); m != socksNoAcceptable {
			t.Errorf("method %#x, want 0xff", m)
		}
	})
	t.Run("not SOCKS5", func(t *testing.T) {
		t.Parallel()
		c := f.dial(t)
		socksGreet(t, c, socksNoAuth)
		c.Write([]byte{0x04, socksConnect, 0, socksIPv4, 127, 0, 0, 4, 0, 80})
		if n, err := c.Read(make([]byte, 10)); n != 0 || err == nil {
			t.Errorf("a SOCKS4 request got %d bytes, %v; want the connection closed", n, err)
		}
	})
	t.Run("connect", func(t *testing.T) {
		t.Parallel()
		c := f.dial(t)
		if got := socksAsk(t, c, socksRequestBytes(socksConnect, echoHost, echoPort)); got != socksSucceeded {
			t.Fatalf("reply %#x, want success", got)
		}
		halfClose(t, c)
	})
	t.Run("IPv4-mapped", func(t *testing.T) {
		t.Parallel()
		c := f.dial(t)
		mapped := netip.AddrFrom16(netip.MustParseAddr(echoHost).As16()).String()
		if got := socksAsk(t, c, socksRequestBytes(socksConnect, mapped, echoPort)); got != socksSucceeded {
			t.Fatalf("reply %#x for %s, want success: the Dialer gets %s", got, mapped, echoHost)
		}
	})
}

// halfClose sends "hello" on a tunnel to the echo upstream, ends its
// side, and expects the echo and "bye" before the end of the stream.
func halfClose(t *testing.T, c net.Conn) {
	t.Helper()
	if _, err := io.WriteString(c, "hello"); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if string(got) != "hellobye" || err != nil {
		t.Fatalf("through the tunnel: %q %v, want hellobye", got, err)
	}
}

// FuzzReadSOCKSRequest: any bytes give a request, a reply to refuse
// it, or an error, and a served request names a host.
func FuzzReadSOCKSRequest(f *testing.F) {
	f.Add(socksRequestBytes(socksConnect, "example.com", 443))
	f.Add(socksRequestBytes(socksConnect, "127.0.0.1", 80))
	f.Add(socksRequestBytes(socksConnect, "::1", 80))
	f.Add(socksRequestBytes(0x02, "::1", 80))
	f.Add([]byte{5, 1, 0, 3, 0, 0, 80})
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := readSOCKSRequest(bytes.NewReader(b))
		if err != nil || req.reply != socksSucceeded {
			return
		}
		if !validName(req.host) || slices.Contains([]byte(req.host), 0) {
			t.Fatalf("served %q", req.host)
		}
	})
}
