package session_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/netpolicy"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	. "github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// policySupervisor is a supervisor on the real sandbox whose Egress has
// the policies of rules (name to the file's text), resolving names with
// the DNS server at dns ("" for the host's resolver).
func policySupervisor(t *testing.T, rules map[string]string, dns string) *Supervisor {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{}
	for name, text := range rules {
		files[name] = filepath.Join(dir, name+".toml")
		if err := os.WriteFile(files[name], []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set, err := netpolicy.NewSet(files)
	if err != nil {
		t.Fatal(err)
	}
	d := &netpolicy.Dialer{Timeout: 10 * time.Second}
	if dns != "" {
		d.Resolver = netpolicy.NewResolver(dns)
	}
	s, err := New(Config{Launcher: SandboxLauncher(integrationLauncher.Get(t)), Egress: &netpolicy.Egress{Set: set, Dialer: d}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// startAttached starts sp as tenant acme's execution id and attaches to
// it from its first event.
func startAttached(t *testing.T, s *Supervisor, id string, sp Spec) (Info, *Subscription) {
	t.Helper()
	info, err := s.Start(t.Context(), "acme", id, sp)
	if err != nil {
		t.Fatal(err)
	}
	sub, _, err := s.Attach("acme", info.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return info, sub
}

// networkNotices are the messages of the network notices among evs.
func networkNotices(evs []replay.Event) []string {
	var notices []string
	for _, ev := range evs {
		if ev.Kind == replay.KindNotice && ev.Notice.Reason == NoticeNetwork {
			notices = append(notices, ev.Notice.Message)
		}
	}
	return notices
}

// oneAndTwo are policies "one" (allowing 127.0.0.2:port) and "two"
// (127.0.0.3:port).
func oneAndTwo(port int) map[string]string {
	return map[string]string{"one": fmt.Sprintf("allow = [\"127.0.0.2:%d\"]\n", port), "two": fmt.Sprintf("allow = [\"127.0.0.3:%d\"]\n", port)}
}

// TestNetworkPolicyInARealSandbox: curl in a sandbox with policy "one"
// reaches what it allows through the proxy the sandbox finds in its
// environment, is refused the rest with the reason (told as a notice
// too), and follows policy "two" once it is changed while it runs.
func TestNetworkPolicyInARealSandbox(t *testing.T) {
	t.Parallel()
	_, err := exec.LookPath("curl")
	sandboxtest.Need(t, "curl (install curl)", err)
	port := sandboxtest.HelloServers(t, "127.0.0.2", "127.0.0.3")
	s := policySupervisor(t, oneAndTwo(port), "")
	ws := sandboxtest.Dir(t)
	script := fmt.Sprintf(`curl -sS http://127.0.0.2:%[1]d/; echo
curl -sS http://127.0.0.3:%[1]d/; echo
echo "$HTTPS_PROXY $ALL_PROXY"
i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
curl -sS http://127.0.0.3:%[1]d/; echo
curl -sS -o /dev/null -w '%%{http_code}\n' http://127.0.0.2:%[1]d/`, port)
	sp := Spec{Policy: sandbox.Policy{Command: []string{"/bin/sh", "-c", script}, Workspace: ws},
		Ring: replay.Config{MaxBytes: 1 << 20}, Network: "one"}
	info, err := s.Start(t.Context(), "acme", "net-1", sp)
	if err != nil {
		t.Fatal(err)
	}
	if info.Network != "one" {
		t.Errorf("info's network %q, want one", info.Network)
	}
	sub, _, err := s.Attach("acme", info.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The change comes once the first part has run: its refusal was
	// counted.
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool {
		st, err := s.Network("acme", info.ID)
		return err == nil && st.Refused == 1 && st.Allowed == 1
	}) {
		st, err := s.Network("acme", info.ID)
		t.Fatalf("the first two connections never counted: %+v %v", st, err)
	}
	if _, err := s.SetNetwork("acme", info.ID, "three"); !errors.Is(err, ErrInvalidSpec) || !errors.Is(err, ErrNoNetworkPolicy) {
		t.Errorf("a change to an unknown policy: %v, want ErrInvalidSpec and ErrNoNetworkPolicy", err)
	}
	st, err := s.SetNetwork("acme", info.ID, "two")
	if err != nil || st.Network != "two" {
		t.Fatalf("SetNetwork: %+v %v", st, err)
	}
	if err := os.WriteFile(filepath.Join(ws, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, evs := drain(t, sub)
	want := fmt.Sprintf("hello from 127.0.0.2\n127.0.0.3:%d is a loopback address, which policy \"one\" does not open\n\n"+
		"http://127.0.0.1:3128 socks5h://127.0.0.1:3128\nhello from 127.0.0.3\n403\n", port)
	if string(out) != want {
		t.Errorf("output %q, want %q", out, want)
	}
	notices := networkNotices(evs)
	if len(notices) != 3 || !strings.Contains(notices[0], fmt.Sprintf("127.0.0.3:%d", port)) ||
		!strings.Contains(notices[1], `now "two" (was "one")`) || !strings.Contains(notices[2], fmt.Sprintf("127.0.0.2:%d", port)) {
		t.Errorf("network notices %q, want the refusal, the change and the second refusal", notices)
	}
	res := mustGet(t, s, "acme", info.ID)
	if res.Result == nil || res.Result.Status != StatusExited || res.Result.ExitCode != 0 || res.Network != "two" {
		t.Errorf("result %+v, network %q", res.Result, res.Network)
	}
	if st, err := s.Network("acme", info.ID); err != nil || st.Allowed != 2 || st.Refused != 2 || st.Open != 0 {
		t.Errorf("network after the end: %+v %v", st, err)
	}
	if _, err := s.SetNetwork("acme", info.ID, "one"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("a change after the end: %v, want ErrNotRunning", err)
	}
}

// TestNetworkPolicyRefusedSpecs: a start that names a policy the server
// lacks, or asks for one with the host's network, is refused; one
// without a policy cannot be given one while it runs.
func TestNetworkPolicyRefusedSpecs(t *testing.T) {
	t.Parallel()
	s := policySupervisor(t, oneAndTwo(9), "")
	ws := sandboxtest.Dir(t)
	for _, tc := range []struct {
		name    string
		network string
		sandbox sandbox.Network
		want    string
	}{
		{"unknown", "three", "", `"three"`},
		{"none is not a policy", "none", "", "not a policy"},
		{"host network", "one", sandbox.NetworkHost, "not the host's"},
	} {
		sp := Spec{Policy: sandbox.Policy{Command: []string{"/bin/true"}, Workspace: ws, Network: tc.sandbox}, Network: tc.network}
		if _, err := s.Start(t.Context(), "acme", "bad", sp); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidSpec saying %s", tc.name, err, tc.want)
		}
	}
	sp := Spec{Policy: sandbox.Policy{Command: []string{"/bin/sleep", "30"}, Workspace: ws}}
	info, err := s.Start(t.Context(), "acme", "plain", sp)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Cancel("acme", info.ID)
	if _, err := s.SetNetwork("acme", info.ID, "one"); !errors.Is(err, ErrNetworkFixed) {
		t.Errorf("a policy for an execution started without one: %v, want ErrNetworkFixed", err)
	}
	if st, err := s.Network("acme", info.ID); err != nil || st.Network != "none" {
		t.Errorf("network of a plain execution: %+v %v, want none", st, err)
	}

	bare, err := New(Config{Launcher: SandboxLauncher(integrationLauncher.Get(t))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bare.Close(context.Background()) })
	sp.Network = "one"
	if _, err := bare.Start(t.Context(), "acme", "x", sp); !errors.Is(err, ErrNoNetworkPolicy) {
		t.Errorf("a policy on a server without any: %v, want ErrNoNetworkPolicy", err)
	}
}

// TestNetworkPolicyWithoutProxyVariables: programs that ignore the proxy
// variables get the same policy through the sandbox's redirect and its
// DNS server: curl with --noproxy reaches an allowed name, a refused name
// does not resolve, nc reaches it by its synthetic address, and a plain
// connect to an address the policy does not allow is reset; each refusal
// is told as a notice.
func TestNetworkPolicyWithoutProxyVariables(t *testing.T) {
	t.Parallel()
	for _, prog := range []string{"curl", "python3", "nc"} {
		_, err := exec.LookPath(prog)
		sandboxtest.Need(t, prog, err)
	}
	port := sandboxtest.HelloServers(t, "127.0.0.2", "127.0.0.3")
	dns := sandboxtest.StartDNS(t, map[string]func(int) []netip.Addr{
		"api.test.": sandboxtest.Fixed("127.0.0.2"), "other.test.": sandboxtest.Fixed("127.0.0.3"),
	})
	s := policySupervisor(t, map[string]string{"web": fmt.Sprintf("allow = [\"api.test:%[1]d\", \"127.0.0.2:%[1]d\"]\n", port)}, dns.Addr())
	script := fmt.Sprintf(`curl --noproxy '*' -sS http://api.test:%[1]d/; echo
printf 'GET / HTTP/1.0\r\nHost: api.test\r\n\r\n' | nc -N -w 10 api.test %[1]d | tail -n 1; echo
curl --noproxy '*' -sS http://other.test:%[1]d/ 2>/dev/null; echo "other=$?"
python3 -c '
import socket
try:
    socket.create_connection(("203.0.113.5", 80), timeout=10).recv(1)
    print("203.0.113.5: connected")
except OSError as e:
    print("203.0.113.5:", type(e).__name__)'`, port)
	sp := Spec{Policy: sandbox.Policy{Command: []string{"/bin/sh", "-c", script}, Workspace: sandboxtest.Dir(t)},
		Ring: replay.Config{MaxBytes: 1 << 20}, Network: "web"}
	_, sub := startAttached(t, s, "direct", sp)
	out, evs := drain(t, sub)
	if want := "hello from 127.0.0.2\nhello from 127.0.0.2\nother=6\n203.0.113.5: ConnectionResetError\n"; string(out) != want {
		t.Errorf("output %q, want %q", out, want)
	}
	notices := networkNotices(evs)
	joined := strings.Join(notices, "\n")
	if strings.Count(joined, "other.test") != 1 || !strings.Contains(joined, "203.0.113.5:80") {
		t.Errorf("notices %q, want other.test's refusal once (a lookup asks for A and AAAA) and 203.0.113.5's", notices)
	}
}

// TestNetworkPolicyRelaysUDP: UDP that a udp: rule allows is relayed
// from a program that ignores proxy variables, to a name termgate's DNS
// answered (for udp: rules alone), and each answer comes back as from
// that name's address; UDP no rule allows gets no answer, and is told
// as a notice.
func TestNetworkPolicyRelaysUDP(t *testing.T) {
	t.Parallel()
	_, err := exec.LookPath("python3")
	sandboxtest.Need(t, "python3", err)
	port := sandboxtest.UDPEcho(t, "127.0.0.5")
	dns := sandboxtest.StartDNS(t, map[string]func(int) []netip.Addr{"udp.test.": sandboxtest.Fixed("127.0.0.5")})
	s := policySupervisor(t, map[string]string{"udp": fmt.Sprintf("allow = [\"udp:udp.test:%[1]d\", \"udp:127.0.0.5:%[1]d\"]\n", port)}, dns.Addr())
	script := fmt.Sprintf(`
import socket
def ask(host, port, *msgs, wait=20):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(wait)
    for msg in msgs:
        s.sendto(msg, (host, port))
        try:
            data, src = s.recvfrom(100)
            print(host, data.decode(), src[0] == socket.gethostbyname(host), flush=True)
        except socket.timeout:
            print(host, "no answer", flush=True)
ask("udp.test", %d, b"one", b"two")
ask("203.0.113.5", 9999, b"refused", wait=2)
`, port)
	sp := Spec{Policy: sandbox.Policy{Command: []string{"python3", "-c", script}, Workspace: sandboxtest.Dir(t)},
		Ring: replay.Config{MaxBytes: 1 << 20}, Network: "udp"}
	_, sub := startAttached(t, s, "udp", sp)
	out, evs := drain(t, sub)
	if want := "udp.test echo:one True\nudp.test echo:two True\n203.0.113.5 no answer\n"; string(out) != want {
		t.Errorf("output %q, want %q", out, want)
	}
	notices := networkNotices(evs)
	if len(notices) != 1 || !strings.Contains(notices[0], "udp 203.0.113.5:9999") {
		t.Errorf("notices %q, want one naming udp 203.0.113.5:9999", notices)
	}
}

// testCA is a certificate authority and a server certificate it signed
// for names, for TLS upstreams that programs in a sandbox verify.
func testCA(t *testing.T, names ...string) (caPEM []byte, cert tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "termgate test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}
}

// gitRepo makes a bare repository repo.git under root holding one
// commit with a README.
func gitRepo(t *testing.T, root, readme string) {
	t.Helper()
	work := t.TempDir()
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t", "HOME="+work)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	git(work, "init", "-q", "src")
	if err := os.WriteFile(filepath.Join(work, "src", "README"), []byte(readme), 0o644); err != nil {
		t.Fatal(err)
	}
	git(filepath.Join(work, "src"), "add", "README")
	git(filepath.Join(work, "src"), "commit", "-q", "-m", "first")
	git(root, "clone", "-q", "--bare", filepath.Join(work, "src"), "repo.git")
}

// TestNetworkPolicyClients: the clients agents use reach what a policy
// allows: curl over HTTPS and git over HTTPS (a local git http-backend)
// through the proxy, by name, verifying a test CA; Node's fetch, which
// ignores the proxy variables, through the redirect.
func TestNetworkPolicyClients(t *testing.T) {
	t.Parallel()
	for _, prog := range []string{"curl", "git", "node"} {
		_, err := exec.LookPath(prog)
		sandboxtest.Need(t, prog, err)
	}
	const backend = "/usr/lib/git-core/git-http-backend"
	_, err := os.Stat(backend)
	sandboxtest.Need(t, backend, err)
	port := sandboxtest.HelloServers(t, "127.0.0.2")
	caPEM, cert := testCA(t, "git.test")
	root := t.TempDir()
	gitRepo(t, root, "cloned through the policy\n")
	mux := http.NewServeMux()
	mux.Handle("/repo.git/", &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello over tls") })
	ln, err := tls.Listen("tcp4", "127.0.0.4:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	tlsPort := ln.Addr().(*net.TCPAddr).Port

	dns := sandboxtest.StartDNS(t, map[string]func(int) []netip.Addr{
		"api.test.": sandboxtest.Fixed("127.0.0.2"), "git.test.": sandboxtest.Fixed("127.0.0.4"),
	})
	rules := fmt.Sprintf("allow = [\"api.test:%[1]d\", \"127.0.0.2:%[1]d\", \"git.test:%[2]d\", \"127.0.0.4:%[2]d\"]\n", port, tlsPort)
	s := policySupervisor(t, map[string]string{"agents": rules}, dns.Addr())
	ws := sandboxtest.Dir(t)
	if err := os.WriteFile(filepath.Join(ws, "ca.pem"), caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`curl -sS --cacert /workspace/ca.pem https://git.test:%[2]d/; echo
git clone -q https://git.test:%[2]d/repo.git /tmp/r && cat /tmp/r/README
node -e 'fetch("http://api.test:%[1]d/").then(r => r.text()).then(t => console.log(t), e => console.log("fetch:", e.cause ?? e))'`, port, tlsPort)
	sp := Spec{Policy: sandbox.Policy{Command: []string{"/bin/sh", "-c", script}, Workspace: ws,
		Env: map[string]string{"HOME": "/workspace", "GIT_SSL_CAINFO": "/workspace/ca.pem"}},
		Ring: replay.Config{MaxBytes: 1 << 20}, Network: "agents", Timeout: time.Minute}
	info, sub := startAttached(t, s, "clients", sp)
	out, _ := drain(t, sub)
	if want := "hello over tls\ncloned through the policy\nhello from 127.0.0.2\n"; string(out) != want {
		t.Errorf("output %q, want %q", out, want)
	}
	st, err := s.Network("acme", info.ID)
	if err != nil || st.Refused != 0 || st.Allowed < 3 {
		t.Errorf("network %+v %v, want every connection allowed", st, err)
	}
}

// goClientSource is a program that ignores the proxy variables: Go's own
// resolver (netdns=go, reading the sandbox's resolv.conf) and a transport
// without a proxy, as a static binary an agent may bring.
const goClientSource = `package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
)

func main() {
	c := &http.Client{Transport: &http.Transport{Proxy: nil}}
	for _, url := range os.Args[1:] {
		resp, err := c.Get(url)
		if err != nil {
			fmt.Println("error")
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(string(b))
	}
}
`

// TestNetworkPolicyStaticGoBinary: a static Go binary with its own
// resolver and no proxy reaches an allowed name through the redirect and
// the sandbox's DNS server, and not a refused one.
func TestNetworkPolicyStaticGoBinary(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	sandboxtest.Need(t, "go", err)
	port := sandboxtest.HelloServers(t, "127.0.0.2", "127.0.0.3")
	ws := sandboxtest.Dir(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(goClientSource), 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command(goTool, "build", "-o", filepath.Join(ws, "client"), "main.go")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the client: %v: %s", err, out)
	}
	dns := sandboxtest.StartDNS(t, map[string]func(int) []netip.Addr{
		"api.test.": sandboxtest.Fixed("127.0.0.2"), "other.test.": sandboxtest.Fixed("127.0.0.3"),
	})
	s := policySupervisor(t, map[string]string{"web": fmt.Sprintf("allow = [\"api.test:%[1]d\", \"127.0.0.2:%[1]d\"]\n", port)}, dns.Addr())
	sp := Spec{Policy: sandbox.Policy{Command: []string{"/workspace/client", fmt.Sprintf("http://api.test:%d/", port), fmt.Sprintf("http://other.test:%d/", port)},
		Workspace: ws, Env: map[string]string{"GODEBUG": "netdns=go"}},
		Ring: replay.Config{MaxBytes: 1 << 20}, Network: "web"}
	_, sub := startAttached(t, s, "gobin", sp)
	if out, _ := drain(t, sub); string(out) != "hello from 127.0.0.2\nerror\n" {
		t.Errorf("output %q, want the allowed name's answer and an error for the refused one", out)
	}
}

// TestNetworkPolicyWithoutAProxyFailsClosed: an execution whose proxy
// cannot be served (here a launcher that opens no sockets) is stopped
// as failed, says why, and is told so; it never runs on without it.
func TestNetworkPolicyWithoutAProxyFailsClosed(t *testing.T) {
	t.Parallel()
	l := &sessiontest.Launcher{Script: sessiontest.UntilStopped}
	file := filepath.Join(t.TempDir(), "web.toml")
	if err := os.WriteFile(file, []byte("allow = [\"example.com\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := netpolicy.NewSet(map[string]string{"web": file})
	if err != nil {
		t.Fatal(err)
	}
	s := newFake(t, l, Config{Egress: &netpolicy.Egress{Set: set}})
	info, err := s.Start(t.Context(), "acme", "noproxy", Spec{Policy: sandbox.Policy{Command: []string{"/bin/sh"}, Workspace: t.TempDir()}, Network: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool { return mustGet(t, s, "acme", info.ID).Result != nil }) {
		t.Fatal("the execution runs on without its proxy")
	}
	sub, _, err := s.Attach("acme", info.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, evs := drain(t, sub)
	res := mustGet(t, s, "acme", info.ID).Result
	if res == nil || res.Status != StatusFailed || !strings.Contains(res.Reason, `network policy "web": its proxy could not start`) {
		t.Fatalf("result %+v, want failed because its proxy could not start", res)
	}
	told := false
	for _, ev := range evs {
		told = told || ev.Kind == replay.KindNotice && ev.Notice.Reason == NoticeNetwork && strings.Contains(ev.Notice.Message, "is stopped")
	}
	if !told {
		t.Error("no notice said why the execution was stopped")
	}
}
