package session_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	. "github.com/termgate/termgate/session"
)

// TestPortsOfARealSandbox: a server a program runs in its sandbox (on
// "localhost", 127.0.0.1 or ::1) is listed and reached from the host; a
// port nothing listens on is ErrPortRefused; an execution sharing the
// host's network has no ports; one that ended, none either.
func TestPortsOfARealSandbox(t *testing.T) {
	t.Parallel()
	_, err := exec.LookPath("python3")
	sandboxtest.Need(t, "python3", err)
	s := realSupervisor(t)
	sp := Spec{Policy: sandbox.Policy{Command: []string{"python3", "-m", "http.server", "--bind", "127.0.0.1", "8765"}, Workspace: sandboxtest.Dir(t)},
		Ring: replay.Config{MaxBytes: 1 << 20}}
	info, err := s.Start(t.Context(), "acme", "web", sp)
	if err != nil {
		t.Fatal(err)
	}
	ports := s.Ports()
	want := netip.MustParseAddrPort("127.0.0.1:8765")
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool {
		l, err := ports.Listening("acme", info.ID)
		return err == nil && slices.Contains(l, want)
	}) {
		l, err := ports.Listening("acme", info.ID)
		t.Fatalf("listening: %v, %v; want %s", l, err, want)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := ports.Dial(ctx, "acme", info.ID, 8765)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("GET / through the port: %v, %v", resp, err)
	}
	c.Close()
	if _, err := ports.Dial(ctx, "acme", info.ID, 8766); !errors.Is(err, ErrPortRefused) {
		t.Errorf("a port nothing listens on: %v, want ErrPortRefused", err)
	}
	if _, err := ports.Dial(ctx, "other", info.ID, 8765); !errors.Is(err, ErrNotFound) {
		t.Errorf("another tenant's: %v, want ErrNotFound", err)
	}
	if _, err := ports.Dial(ctx, "acme", info.ID, 0); !errors.Is(err, ErrInvalidPort) {
		t.Errorf("port 0: %v, want ErrInvalidPort", err)
	}

	host := Spec{Policy: sandbox.Policy{Command: []string{"sleep", "30"}, Workspace: sandboxtest.Dir(t), Network: sandbox.NetworkHost}}
	hi, err := s.Start(t.Context(), "acme", "host", host)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ports.Dial(ctx, "acme", hi.ID, 22); !errors.Is(err, ErrHostPorts) {
		t.Errorf("a host-network execution's port: %v, want ErrHostPorts", err)
	}
	if _, err := ports.Listening("acme", hi.ID); !errors.Is(err, ErrHostPorts) {
		t.Errorf("a host-network execution's listeners: %v, want ErrHostPorts", err)
	}
	s.Cancel("acme", hi.ID)
	s.Cancel("acme", info.ID)
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool {
		_, err := ports.Listening("acme", info.ID)
		return errors.Is(err, ErrNotRunning)
	}) {
		_, err := ports.Listening("acme", info.ID)
		t.Errorf("an ended execution's listeners: %v, want ErrNotRunning", err)
	}
}

// TestPortsLeaveOutTermgatesOwn: an execution with a network policy
// lists its program's listeners, not the proxy's, the transparent
// listener's or the DNS server's.
func TestPortsLeaveOutTermgatesOwn(t *testing.T) {
	t.Parallel()
	s := policySupervisor(t, map[string]string{"one": "allow = [\"example.test:443\"]\n"}, "")
	sp := Spec{Policy: sandbox.Policy{Command: []string{"sleep", "30"}, Workspace: sandboxtest.Dir(t)}, Network: "one"}
	info, err := s.Start(t.Context(), "acme", "policy", sp)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Cancel("acme", info.ID)
	l, err := s.Ports().Listening("acme", info.ID)
	if err != nil || len(l) != 0 {
		var own []string
		for _, ap := range l {
			own = append(own, ap.String())
		}
		t.Errorf("listening: %s, %v; want none", strings.Join(own, " "), err)
	}
}
