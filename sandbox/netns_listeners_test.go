//go:build linux

package sandbox

import (
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

func TestProcAddr(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"0100007F:1F90":                         "127.0.0.1:8080",
		"00000000:0050":                         "0.0.0.0:80",
		"00000000000000000000000001000000:0016": "[::1]:22",
		"0000000000000000FFFF00000100007F:01BB": "127.0.0.1:443",
		"00000000000000000000000000000000:0035": "[::]:53",
	} {
		got, err := procAddr(in)
		if err != nil || got.String() != want {
			t.Errorf("procAddr(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0100007F", "0100007F:", "01007F:0050", "zz00007F:0050", "0100007F:10000"} {
		if got, err := procAddr(bad); err == nil {
			t.Errorf("procAddr(%q) = %v, want an error", bad, got)
		}
	}
}

func TestListeningSkipsOtherStates(t *testing.T) {
	t.Parallel()
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1
   2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3 1 0 100 0 0 10 0
`
	got, err := listening(strings.NewReader(table), nil)
	if err != nil || len(got) != 2 || got[0].String() != "127.0.0.1:8080" || got[1].String() != "0.0.0.0:22" {
		t.Errorf("listening: %v, %v", got, err)
	}
}

// TestListenersOfASandbox: the sockets a program listens on in its
// sandbox are listed from the host, IPv4 and IPv6.
func TestListenersOfASandbox(t *testing.T) {
	t.Parallel()
	needNetNS(t)
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		sandboxtest.Unavailable(t, "no %s", python)
	}
	l := needLauncher(t)
	script := `
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 4201)); s.listen()
try:
    s6 = socket.socket(socket.AF_INET6); s6.bind(("::1", 4202)); s6.listen()
except OSError: pass
print("listening", flush=True)
sys.stdin.readline()
`
	var out sandboxtest.SyncBuffer
	proc, err := l.Start(t.Context(), Policy{Command: []string{python, "-c", script}, Workspace: sandboxtest.Dir(t)}, Stdio{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Wait()
	defer proc.Kill()
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool { return strings.Contains(out.String(), "listening") }) {
		t.Fatalf("the program never listened: %q", out.String())
	}
	ns, err := proc.NetNS()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	got, err := ns.Listeners()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, netip.MustParseAddrPort("127.0.0.1:4201")) {
		t.Errorf("listeners %v, want 127.0.0.1:4201", got)
	}
	if _, err := os.Stat("/proc/net/if_inet6"); err == nil && !slices.Contains(got, netip.MustParseAddrPort("[::1]:4202")) {
		t.Errorf("listeners %v, want [::1]:4202", got)
	}
	proc.Stdin().Write([]byte("\n"))
	proc.Wait()
}
