//go:build linux

package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"strings"
	"testing"
	"time"
)

func validPolicy() Policy {
	return Policy{Command: []string{"/bin/sh", "-c", "true"}, Workspace: "/srv/ws"}
}

func TestValidateRejects(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		mutate func(*Policy)
		want   string
	}{
		{"empty command", func(p *Policy) { p.Command = nil }, "command is empty"},
		{"relative path command", func(p *Policy) { p.Command = []string{"bin/x"} }, "must be absolute"},
		{"equals in program", func(p *Policy) { p.Command = []string{"A=b"} }, "cannot contain '='"},
		{"NUL in argument", func(p *Policy) { p.Command = []string{"x", "a\x00b"} }, "NUL"},
		{"too many arguments", func(p *Policy) { p.Command = make([]string, maxArgs+1); p.Command[0] = "x" }, "arguments"},
		{"bad env name", func(p *Policy) { p.Env = map[string]string{"1X": "v"} }, "must match"},
		{"env name with equals", func(p *Policy) { p.Env = map[string]string{"A=B": "v"} }, "must match"},
		{"env NUL", func(p *Policy) { p.Env = map[string]string{"A": "\x00"} }, "NUL"},
		{"huge env", func(p *Policy) { p.Env = map[string]string{"A": strings.Repeat("x", maxEnvBytes)} }, "environment takes"},
		{"relative workspace", func(p *Policy) { p.Workspace = "ws" }, "must be absolute"},
		{"unclean cwd", func(p *Policy) { p.Cwd = "/workspace/../etc" }, "must be clean"},
		{"relative cwd", func(p *Policy) { p.Cwd = "src" }, "must be absolute"},
		{"bind over /usr", func(p *Policy) { p.Binds = []Bind{{Source: "/srv/x", Dest: "/usr/lib"}} }, "reserved"},
		{"bind over /proc", func(p *Policy) { p.Binds = []Bind{{Source: "/srv/x", Dest: "/proc"}} }, "reserved"},
		{"bind twice", func(p *Policy) { p.Binds = []Bind{{Source: "/a", Dest: "/x"}, {Source: "/b", Dest: "/x"}} }, "used twice"},
		{"bind over workspace", func(p *Policy) { p.Binds = []Bind{{Source: "/a", Dest: "/workspace"}} }, "used twice"},
		{"workspace mount reserved", func(p *Policy) { p.WorkspaceMount = "/etc" }, "reserved"},
		{"network", func(p *Policy) { p.Network = "bridge" }, "network"},
		{"proc", func(p *Policy) { p.Proc = "host" }, "proc"},
		{"self-exe without mode", func(p *Policy) { p.SelfExe = "/bin/x" }, "self-exe"},
		{"self-exe relative", func(p *Policy) { p.Proc, p.SelfExe = ProcSelfExe, "x" }, "must be absolute"},
		{"zero tty", func(p *Policy) { p.TTY = &WindowSize{} }, "1x1"},
		{"negative timeout", func(p *Policy) { p.Timeout = -time.Second }, "negative"},
		{"tiny tmp", func(p *Policy) { p.TmpSize = 10 }, "tmp size"},
		{"tiny memory", func(p *Policy) { p.Limits.Memory = 1 }, "memory"},
		{"tiny open files", func(p *Policy) { p.Limits.OpenFiles = 3 }, "open files"},
		{"cpu weight", func(p *Policy) { p.Limits.CPUWeight = 10001 }, "cpu weight"},
		{"listen with the host's network", func(p *Policy) { p.Network, p.Listen = NetworkHost, []Socket{{Network: "tcp", Addr: "127.0.0.1:3128"}} }, "need network none"},
		{"listen on a LAN address", func(p *Policy) { p.Listen = []Socket{{Network: "tcp", Addr: "10.0.0.1:3128"}} }, `"10.0.0.1:3128" is not a loopback address`},
		{"listen on every address", func(p *Policy) { p.Listen = []Socket{{Network: "tcp", Addr: "0.0.0.0:3128"}} }, "not a loopback address"},
		{"listen on every IPv6 address", func(p *Policy) { p.Listen = []Socket{{Network: "udp6", Addr: "[::]:53"}} }, "not a loopback address"},
		{"listen on a name", func(p *Policy) { p.Listen = []Socket{{Network: "tcp", Addr: "localhost:3128"}} }, "want an IP address and a port"},
		{"listen without a port", func(p *Policy) { p.Listen = []Socket{{Network: "tcp", Addr: "127.0.0.1"}} }, "want an IP address and a port"},
		{"listen on port 0", func(p *Policy) { p.Listen = []Socket{{Network: "tcp", Addr: "127.0.0.1:0"}} }, "port other than 0"},
		{"listen on another network", func(p *Policy) { p.Listen = []Socket{{Network: "unix", Addr: "127.0.0.1:3128"}} }, "want tcp, tcp4, tcp6, udp, udp4 or udp6"},
		{"listen in the wrong family", func(p *Policy) { p.Listen = []Socket{{Network: "tcp4", Addr: "[::1]:3128"}} }, "not of network tcp4"},
		{"listen on a mapped address", func(p *Policy) { p.Listen = []Socket{{Network: "tcp6", Addr: "[::ffff:127.0.0.1]:3128"}} }, "write an IPv4 address as such"},
		{"listen twice", func(p *Policy) {
			p.Listen = []Socket{{Network: "tcp", Addr: "127.0.0.1:3128"}, {Network: "tcp4", Addr: "127.0.0.1:3128"}}
		}, "127.0.0.1:3128 is given twice"},
		{"listen too often", func(p *Policy) {
			for i := range MaxListen + 1 {
				p.Listen = append(p.Listen, Socket{Network: "tcp", Addr: fmt.Sprintf("127.0.0.1:%d", 3000+i)})
			}
		}, "17 listening sockets, at most 16 allowed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := validPolicy()
			c.mutate(&p)
			err := p.Normalize().Validate()
			if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Validate() = %v, want ErrInvalidPolicy containing %q", err, c.want)
			}
		})
	}
}

func TestNormalizeFillsDefaults(t *testing.T) {
	t.Parallel()
	p := validPolicy().Normalize()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if p.Cwd != "/workspace" || p.Network != NetworkNone || p.Proc != ProcNone || p.TmpSize != DefaultTmpSize || p.Env["PATH"] != DefaultPath {
		t.Errorf("defaults: %+v", p)
	}
}

func FuzzValidateSandboxPath(f *testing.F) {
	for _, s := range []string{"/workspace", "/a/../b", "//x", "/x/", "x", "", "/proc/self/fd/3", "/a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if ValidateSandboxPath("p", p) != nil {
			return
		}
		// Accepted paths are absolute, clean and can never climb.
		if !path.IsAbs(p) || path.Clean(p) != p || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") || strings.IndexByte(p, 0) >= 0 {
			t.Fatalf("accepted %q", p)
		}
	})
}

func FuzzValidateEnv(f *testing.F) {
	for _, s := range []string{"PATH", "_x1", "1x", "A=B", "", "a-b", "ÄB"} {
		f.Add(s, "value")
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		p := validPolicy()
		p.Env = map[string]string{name: value}
		err := p.Normalize().Validate()
		if err != nil {
			return
		}
		if name == "" || name[0] >= '0' && name[0] <= '9' {
			t.Fatalf("accepted name %q", name)
		}
		for _, r := range name {
			if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				t.Fatalf("accepted name %q", name)
			}
		}
		if strings.IndexByte(value, 0) >= 0 {
			t.Fatalf("accepted a NUL in the value of %q", name)
		}
	})
}

func TestClampWindowSize(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		rows, cols int
		want       WindowSize
	}{
		{24, 80, WindowSize{24, 80}},
		{0, -5, WindowSize{1, 1}},
		{MaxWindowSide + 1, 1 << 17, WindowSize{MaxWindowSide, MaxWindowSide}}, // 1<<17 would wrap in uint16
	} {
		if got := ClampWindowSize(tt.rows, tt.cols); got != tt.want {
			t.Errorf("ClampWindowSize(%d, %d) = %v, want %v", tt.rows, tt.cols, got, tt.want)
		}
	}
}

// TestListenPolicyAccepted: loopback addresses of both families, and a
// port taken by tcp and udp at once, survive validation and the JSON
// the keeper keeps a policy in.
func TestListenPolicyAccepted(t *testing.T) {
	t.Parallel()
	p := validPolicy()
	p.Listen = []Socket{{Network: "tcp", Addr: "127.0.0.1:3128"}, {Network: "udp", Addr: "127.0.0.1:3128"}, {Network: "udp4", Addr: "127.0.0.53:53"}, {Network: "tcp6", Addr: "[::1]:3128"}}
	if err := p.Normalize().Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil || !strings.Contains(string(b), `"listen":[{"network":"tcp","addr":"127.0.0.1:3128"}`) {
		t.Fatalf("json %s, %v", b, err)
	}
	var back Policy
	if err := json.Unmarshal(b, &back); err != nil || len(back.Listen) != 4 || back.Listen[3] != p.Listen[3] {
		t.Errorf("json round trip: %+v, %v", back.Listen, err)
	}
}

func FuzzValidateListen(f *testing.F) {
	for _, s := range [][2]string{{"tcp", "127.0.0.1:3128"}, {"udp6", "[::1]:53"}, {"tcp", "0.0.0.0:80"}, {"tcp4", "[::1]:1"}, {"tcp", "[fe80::1%lo]:80"}, {"udp", "127.1:53"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, network, addr string) {
		p := validPolicy()
		p.Listen = []Socket{{Network: network, Addr: addr}}
		if p.Normalize().Validate() != nil {
			return
		}
		// Accepted: a loopback IP literal, a fixed port, a known network.
		ap, err := netip.ParseAddrPort(addr)
		if err != nil || !ap.Addr().IsLoopback() || ap.Port() == 0 || ap.Addr().Zone() != "" {
			t.Fatalf("accepted %s %q", network, addr)
		}
		if _, err := parseEndpoint(network, addr); err != nil {
			t.Fatalf("accepted %s %q: %v", network, addr, err)
		}
	})
}
