package netpolicy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// egressEnv is an Egress with two policies, "one" (allowing the greeter
// on 127.0.0.2) and "two" (the one on 127.0.0.3), and a Guard serving a
// proxy on 127.0.0.1 for tenant acme's execution x1 under "one".
type egressEnv struct {
	g      *greeters
	egress *Egress
	guard  *Guard
	proxy  string // host:port

	mu      sync.Mutex
	events  []Event
	notices []string
}

func startEgress(t *testing.T, tune func(*Egress)) *egressEnv {
	t.Helper()
	env := &egressEnv{g: startGreeters(t)}
	dir := t.TempDir()
	files := map[string]string{"one": filepath.Join(dir, "one.toml"), "two": filepath.Join(dir, "two.toml")}
	writePolicy(t, files["one"], fmt.Sprintf("allow = [\"127.0.0.2:%d\"]\n", env.g.port))
	writePolicy(t, files["two"], fmt.Sprintf("allow = [\"127.0.0.3:%d\"]\n", env.g.port))
	set, err := NewSet(files)
	if err != nil {
		t.Fatal(err)
	}
	env.egress = &Egress{Set: set, Dialer: &Dialer{Timeout: 5 * time.Second}, Observe: env.observe}
	if tune != nil {
		tune(env.egress)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	env.proxy = ln.Addr().String()
	env.guard, err = env.egress.Serve(Execution{Tenant: "acme", ID: "x1", Policy: "one", Notify: env.notify}, Listeners{Proxy: ln})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.guard.Close() })
	return env
}

func (env *egressEnv) observe(ev Event) {
	env.mu.Lock()
	defer env.mu.Unlock()
	env.events = append(env.events, ev)
}

func (env *egressEnv) notify(msg string) {
	env.mu.Lock()
	defer env.mu.Unlock()
	env.notices = append(env.notices, msg)
}

func (env *egressEnv) seen() ([]Event, []string) {
	env.mu.Lock()
	defer env.mu.Unlock()
	return append([]Event(nil), env.events...), append([]string(nil), env.notices...)
}

// connect asks the proxy for a CONNECT tunnel to ip:port and returns the
// status and what came back: the greeting, or the refusal's body.
func (env *egressEnv) connect(t *testing.T, ip string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", env.proxy, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	target := net.JoinHostPort(ip, fmt.Sprint(env.g.port))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	var b []byte
	if resp.StatusCode == http.StatusOK {
		b, err = io.ReadAll(br)
	} else {
		b, err = io.ReadAll(resp.Body)
	}
	if err != nil {
		t.Fatalf("CONNECT %s: read: %v", target, err)
	}
	return resp.StatusCode, string(b)
}

// waitEnded waits until n connections were reported ended.
func (env *egressEnv) waitEnded(t *testing.T, n int) []Event {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs, _ := env.seen()
		var ended []Event
		for _, ev := range evs {
			if ev.Ended {
				ended = append(ended, ev)
			}
		}
		if len(ended) >= n {
			return ended
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections ended, want %d: %+v", len(ended), n, evs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEgressPolicyChangesForNewConnections: the policy in force when a
// connection is asked for decides it; a change reaches the next
// connection at once, and a refusal is told, observed and counted.
func TestEgressPolicyChangesForNewConnections(t *testing.T) {
	t.Parallel()
	env := startEgress(t, nil)
	if code, body := env.connect(t, "127.0.0.2"); code != http.StatusOK || body != "127.0.0.2" {
		t.Fatalf("policy one, 127.0.0.2: %d %q", code, body)
	}
	code, body := env.connect(t, "127.0.0.3")
	if code != http.StatusForbidden || !strings.Contains(body, `policy "one"`) {
		t.Fatalf("policy one, 127.0.0.3: %d %q, want 403 naming the policy", code, body)
	}
	if err := env.guard.SetPolicy("two"); err != nil {
		t.Fatal(err)
	}
	if code, body := env.connect(t, "127.0.0.3"); code != http.StatusOK || body != "127.0.0.3" {
		t.Fatalf("policy two, 127.0.0.3: %d %q", code, body)
	}
	if code, _ := env.connect(t, "127.0.0.2"); code != http.StatusForbidden {
		t.Fatalf("policy two, 127.0.0.2: %d, want 403", code)
	}
	if err := env.guard.SetPolicy("three"); err == nil || !strings.Contains(err.Error(), `"three"`) {
		t.Errorf("SetPolicy of an unknown policy: %v", err)
	}
	if err := env.guard.SetPolicy(NameNone); err != nil {
		t.Fatal(err)
	}
	code, body = env.connect(t, "127.0.0.2")
	if code != http.StatusForbidden || !strings.Contains(body, `network is "none"`) {
		t.Fatalf("policy none: %d %q, want 403", code, body)
	}

	policies := map[string]bool{}
	for _, ev := range env.waitEnded(t, 2) { // in either order
		policies[ev.Decision.Policy] = true
		if ev.Down != int64(len("127.0.0.x")) || ev.Tenant != "acme" || ev.Execution != "x1" || ev.Protocol != "http-connect" {
			t.Errorf("ended connection: %+v, want 9 bytes down", ev)
		}
	}
	if !policies["one"] || !policies["two"] {
		t.Errorf("ended connections decided by %v, want one and two", policies)
	}
	_, notices := env.seen()
	if len(notices) != 3 || !strings.HasPrefix(notices[0], "network: 127.0.0.3:") || !strings.Contains(notices[2], `"none"`) {
		t.Errorf("notices %q, want the three refusals", notices)
	}
	st := env.guard.Status()
	if st.Policy != NameNone || st.Allowed != 2 || st.Refused != 3 || st.Down != 18 || st.Open != 0 {
		t.Errorf("status %+v", st)
	}
	stats := env.egress.Stats()
	if stats["one"].Allowed != 1 || stats["one"].Refused != 1 || stats["two"].Allowed != 1 || stats["two"].Refused != 1 || stats[NameNone].Refused != 1 || stats["one"].Down != 9 {
		t.Errorf("stats %+v", stats)
	}
}

// TestEgressNoticesArePaced: a burst of refusals is told a few at a
// time; the ones not told are counted in the next notice.
func TestEgressNoticesArePaced(t *testing.T) {
	t.Parallel()
	env := startEgress(t, nil)
	const n = 3 * noticeBurst
	for range n {
		if code, _ := env.connect(t, "127.0.0.4"); code != http.StatusForbidden {
			t.Fatalf("127.0.0.4: %d, want 403", code)
		}
	}
	_, notices := env.seen()
	if len(notices) >= n || len(notices) < noticeBurst {
		t.Fatalf("%d notices for %d refusals, want the burst of %d and few more", len(notices), n, noticeBurst)
	}
	time.Sleep(noticeEvery + 50*time.Millisecond)
	env.connect(t, "127.0.0.4")
	_, after := env.seen()
	last := after[len(after)-1]
	if len(after) != len(notices)+1 || !strings.Contains(last, "more refused, not shown") {
		t.Errorf("after a pause: %q, want one notice counting the ones not shown", after[len(notices):])
	}
	if st := env.guard.Status(); st.Refused != n+1 {
		t.Errorf("refused %d, want %d: every refusal counts", st.Refused, n+1)
	}
}

// holdTunnel opens a CONNECT tunnel, under policy "one" (which then
// allows the greeters and it), to a listener on 127.0.0.2 that keeps
// the connection unaccepted: the listener, the client's connection and
// its reader past the 200.
func (env *egressEnv) holdTunnel(t *testing.T) (net.Listener, net.Conn, *bufio.Reader) {
	t.Helper()
	keep, err := net.Listen("tcp4", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { keep.Close() })
	port := keep.Addr().(*net.TCPAddr).Port
	writePolicy(t, env.egress.Set.files["one"], fmt.Sprintf("allow = [\"127.0.0.2:%d\", \"127.0.0.2:%d\"]\n", env.g.port, port))
	if err := env.egress.Set.Reload(); err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", env.proxy, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "CONNECT 127.0.0.2:%d HTTP/1.1\r\n\r\n", port)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the tunnel: %v %v", resp, err)
	}
	return keep, c, br
}

// TestEgressTenantLimit: a tenant's connections beyond its limit are
// refused with the reason, and one ending makes room again.
func TestEgressTenantLimit(t *testing.T) {
	t.Parallel()
	env := startEgress(t, func(e *Egress) { e.MaxConnsPerTenant = 1 })
	keep, c, _ := env.holdTunnel(t)
	code, body := env.connect(t, "127.0.0.2")
	if code != http.StatusForbidden || !strings.Contains(body, `tenant "acme" has 1 connections open`) {
		t.Fatalf("beyond the tenant's limit: %d %q", code, body)
	}
	c.Close()
	if far, err := keep.Accept(); err == nil { // the tunnel ends when both sides did
		far.Close()
	}
	deadline := time.Now().Add(30 * time.Second)
	for env.guard.Status().Open != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if code, body := env.connect(t, "127.0.0.2"); code != http.StatusOK {
		t.Fatalf("after the first ended: %d %q", code, body)
	}
	if st := env.guard.Status(); st.Failed != 1 || st.Allowed != 2 {
		t.Errorf("status %+v, want 1 failed (the limit) and 2 allowed", st)
	}
}

// TestEgressCloseEndsConnections: closing a Guard closes its tunnels
// and its listener, and reports their ends.
func TestEgressCloseEndsConnections(t *testing.T) {
	t.Parallel()
	env := startEgress(t, nil)
	_, _, br := env.holdTunnel(t)
	if n := env.egress.Serving(); n != 1 {
		t.Errorf("serving %d, want 1", n)
	}
	env.guard.Close()
	if _, err := br.ReadByte(); err == nil {
		t.Error("the tunnel is open after Close")
	}
	if _, err := net.DialTimeout("tcp", env.proxy, time.Second); err == nil {
		t.Error("the listener accepts after Close")
	}
	env.waitEnded(t, 1)
	if n := env.egress.Serving(); n != 0 {
		t.Errorf("serving %d after Close, want 0", n)
	}
	env.egress.mu.Lock()
	open := env.egress.tenants["acme"]
	env.egress.mu.Unlock()
	if open != 0 {
		t.Errorf("the tenant holds %d connections after Close, want 0", open)
	}
}

// TestEgressRefuseIsTold: a connection the proxy refused without asking
// (a stale synthetic address) is counted and told like a policy's.
func TestEgressRefuseIsTold(t *testing.T) {
	t.Parallel()
	env := startEgress(t, nil)
	env.guard.Refuse("tcp", "198.18.0.9", 443, "198.18.0.9 is an address termgate's DNS gave out for a name it no longer holds: look the name up again")
	evs, notices := env.seen()
	if len(notices) != 1 || !strings.HasPrefix(notices[0], "network: 198.18.0.9 is an address") {
		t.Errorf("notices %q", notices)
	}
	if len(evs) != 1 || evs[0].Decision.Allowed || evs[0].Decision.Addr.String() != "198.18.0.9" || evs[0].Decision.Port != 443 || evs[0].Decision.Policy != "one" {
		t.Errorf("events %+v", evs)
	}
	if st := env.guard.Status(); st.Refused != 1 {
		t.Errorf("status %+v, want 1 refused", st)
	}
}
