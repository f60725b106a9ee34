package cluster

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestNewStatic(t *testing.T) {
	t.Parallel()
	m, err := NewStatic("n1", map[string]string{"n0": "http://127.0.0.1:8080", "n1": "http://127.0.0.2:8080/", "n2": "https://n2.example:443"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Self() != "n1" {
		t.Errorf("Self = %q", m.Self())
	}
	if got := m.Members(); !slices.Equal(got, []string{"n0", "n1", "n2"}) {
		t.Errorf("Members = %q", got)
	}
	for node, want := range map[string]string{"n0": "http://127.0.0.1:8080", "n1": "http://127.0.0.2:8080", "n2": "https://n2.example:443", "n3": "", "N0": ""} {
		u, ok := m.URL(node)
		if want == "" {
			if ok {
				t.Errorf("URL(%q) = %v, want none", node, u)
			}
			continue
		}
		if !ok || u.String() != want {
			t.Errorf("URL(%q) = %v, %v; want %s", node, u, ok, want)
		}
		u.Host = "changed" // a copy: the membership keeps its own
	}
	if u, _ := m.URL("n0"); u.Host != "127.0.0.1:8080" {
		t.Errorf("URL's result shares the membership's URL: %v", u)
	}
	alone, err := NewStatic("n0", nil)
	if err != nil || !slices.Equal(alone.Members(), []string{"n0"}) {
		t.Errorf("NewStatic(n0, nil) = %v, %v", alone.Members(), err)
	}
}

func TestNewStaticRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		self  string
		peers map[string]string
		want  string
	}{
		{"N1", nil, `node name "N1"`},
		{"n1", map[string]string{"bad_name": "http://h:1"}, `peer "bad_name"`},
		{"n1", map[string]string{"n0": "ftp://h:1"}, "want http or https"},
		{"n1", map[string]string{"n0": "http://h:1/v1"}, "no path"},
		{"n1", map[string]string{"n0": "http://h:1?x=1"}, "no path, query"},
		{"n1", map[string]string{"n0": "http://:1"}, "no host"},
		{"n1", map[string]string{"n0": "http://u:p@h:1"}, "user"},
		{"n1", map[string]string{"n0": "http://h:0"}, "bad port"},
		{"n1", map[string]string{"n0": "http://h:99999"}, "bad port"},
		{"n1", map[string]string{"n0": "h:1"}, "want http or https"},
		{"n1", map[string]string{"n0": "http://h\x7f"}, "url"},
	} {
		if _, err := NewStatic(tc.self, tc.peers); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewStatic(%q, %v) = %v, want %q", tc.self, tc.peers, err, tc.want)
		}
	}
}

func TestNewDNSRefuses(t *testing.T) {
	t.Parallel()
	ok := DNSConfig{Domain: "h.default.svc.cluster.local", Port: 8080}
	for _, tc := range []struct {
		self string
		edit func(c *DNSConfig)
		want string
	}{
		{"-n", func(*DNSConfig) {}, "node name"},
		{"n0", func(c *DNSConfig) { c.Domain = "" }, "peer domain"},
		{"n0", func(c *DNSConfig) { c.Domain = "h:80" }, "peer domain"},
		{"n0", func(c *DNSConfig) { c.Port = 0 }, "peer port 0"},
		{"n0", func(c *DNSConfig) { c.Port = 65536 }, "peer port 65536"},
		{"n0", func(c *DNSConfig) { c.Scheme = "ws" }, "peer scheme"},
		{"n0", func(c *DNSConfig) { c.Grace = -1 }, "negative"},
	} {
		c := ok
		tc.edit(&c)
		if _, err := NewDNS(tc.self, c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewDNS(%q, %+v) = %v, want %q", tc.self, c, err, tc.want)
		}
	}
}

// fakeDNS answers LookupSRV from a list it is given, or fails.
type fakeDNS struct {
	mu      sync.Mutex
	targets []string
	err     error
	asked   []string
}

func (f *fakeDNS) set(err error, targets ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.targets, f.err = targets, err
}

func (f *fakeDNS) LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, "_"+service+"._"+proto+"."+name)
	if f.err != nil {
		return "", nil, f.err
	}
	var srvs []*net.SRV
	for _, t := range f.targets {
		srvs = append(srvs, &net.SRV{Target: t, Port: 8080})
	}
	return "", srvs, nil
}

// TestDNSMembership: names come from the SRV targets; a vanished name
// stays for the grace and goes after it; a failed lookup keeps the list.
func TestDNSMembership(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const domain = "termgate-headless.default.svc.cluster.local"
		dns := &fakeDNS{}
		dns.set(nil, "termgate-0."+domain+".", "termgate-1."+domain+".", "TERMGATE-2."+strings.ToUpper(domain)+".",
			"other.example.com.", "bad_name."+domain+".", "termgate-3.elsewhere.svc.cluster.local.")
		m, err := NewDNS("termgate-1", DNSConfig{Domain: domain + ".", Port: 8080, Refresh: 10 * time.Second, Grace: time.Minute, LookupSRV: dns.LookupSRV})
		if err != nil {
			t.Fatal(err)
		}
		members := func(want ...string) {
			t.Helper()
			if got := m.Members(); !slices.Equal(got, want) {
				t.Fatalf("at %s: Members = %q, want %q", time.Now().Format("15:04:05"), got, want)
			}
		}
		members("termgate-1") // before any lookup: self alone
		if u, ok := m.URL("termgate-7"); !ok || u.String() != "http://termgate-7."+domain+":8080" {
			t.Fatalf("URL before a lookup = %v, %v", u, ok) // an ID routes before the first refresh
		}
		if _, ok := m.URL("Termgate-7"); ok {
			t.Fatal("URL of a malformed name")
		}

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); m.Run(ctx) }()
		synctest.Wait()
		members("termgate-0", "termgate-1", "termgate-2") // added; foreign targets ignored

		dns.set(nil, "termgate-1."+domain+".", "termgate-2."+domain+".") // termgate-0 vanished
		time.Sleep(50 * time.Second)
		synctest.Wait()
		members("termgate-0", "termgate-1", "termgate-2") // within the grace

		dns.set(errors.New("SERVFAIL"))
		time.Sleep(5 * time.Minute) // lookups fail: the list stays, grace or not
		synctest.Wait()
		members("termgate-0", "termgate-1", "termgate-2")

		dns.set(nil, "termgate-1."+domain+".", "termgate-2."+domain+".")
		time.Sleep(10 * time.Second)
		synctest.Wait()
		members("termgate-1", "termgate-2") // gone after the grace

		cancel()
		<-done
		dns.mu.Lock()
		defer dns.mu.Unlock()
		if n := len(dns.asked); n < 30 || n > 40 || dns.asked[0] != "_http._tcp."+domain {
			t.Fatalf("%d lookups in 6 minutes at 10 s (want 37), first %q", n, dns.asked[0])
		}
	})
}

// TestDNSLookupBounded: a resolver that never answers costs one lookup
// timeout, not the loop.
func TestDNSLookupBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m, err := NewDNS("n0", DNSConfig{Domain: "d.local", Port: 1, Refresh: time.Minute, LookupSRV: func(ctx context.Context, _, _, _ string) (string, []*net.SRV, error) {
			<-ctx.Done()
			return "", nil, ctx.Err()
		}})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := m.Refresh(t.Context()); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Refresh = %v", err)
		}
		if d := time.Since(start); d != maxLookup {
			t.Fatalf("a stalled lookup took %s, want %s", d, maxLookup)
		}
	})
}

func TestStaticRunReturns(t *testing.T) {
	t.Parallel()
	m, err := NewStatic("n0", nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Run(t.Context()) // returns at once
	if err := m.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
}
