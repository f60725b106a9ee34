package gateway

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/termgate/termgate/gateway/audit"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session/sessiontest"
)

// scrape reads the metrics handler's text exposition into series (name
// with its labels, as written) and values.
func scrape(t testing.TB, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	// Prometheus's Go parser refuses a bad escape, value or type, and a
	// family's HELP or TYPE twice; it takes a sample away from its family
	// and a series twice, which the loop below refuses.
	parser := expfmt.NewTextParser(model.LegacyValidation)
	if _, err := parser.TextToMetricFamilies(bytes.NewReader(body)); err != nil {
		t.Fatalf("Prometheus's parser refuses /metrics: %v\n%s", err, body)
	}
	out := map[string]float64{}
	family := ""
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			family, _, _ = strings.Cut(name, " ")
		}
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		if !strings.HasPrefix(line, family) {
			t.Fatalf("metrics line %q is not under its family's TYPE (the last was %s)", line, family)
		}
		if _, twice := out[line[:i]]; twice {
			t.Fatalf("metrics series %s twice", line[:i])
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// want checks series against wanted values, eventually: a connection's
// end is counted after its close handshake.
func wantMetrics(t testing.TB, url, step string, want map[string]float64) {
	t.Helper()
	var got map[string]float64
	ok := sandboxtest.Eventually(t, 10*time.Second, func() bool {
		got = scrape(t, url)
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				return false
			}
		}
		return true
	})
	if !ok {
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("%s: %s = %v (present %v), want %v", step, k, g, ok, v)
			}
		}
	}
}

// TestMetricsMove: a real gateway over the fake launcher; the scraped
// figures move as an execution starts and ends, a connection closes and
// tokens are refused.
func TestMetricsMove(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, nil)
	ms := httptest.NewServer(e.srv.MetricsHandler())
	defer ms.Close()

	got := scrape(t, ms.URL)
	for _, k := range []string{"go_goroutines", "process_open_fds"} {
		if _, ok := got[k]; !ok {
			t.Errorf("no %s: the runtime and process collectors are missing", k)
		}
	}
	wantMetrics(t, ms.URL, "before", map[string]float64{
		"termgate_executions_running": 0, "termgate_executions_started_total": 0,
		`termgate_executions_ended_total{reason="cancelled",status="cancelled"}`: 0,
		`termgate_executions_ended_total{reason="limit:memory",status="limit"}`:  0,
		"termgate_connections_open":                        0,
		`termgate_auth_failures_total{reason="malformed"}`: 0,
		"termgate_sandbox_start_seconds_count":             0,
	})

	c := e.dial(t, e.token(t, "acme", allScopes...))
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "one", Command: "/bin/sh", Attach: true})
	c.expect(t, wire.MsgStarted)
	wantMetrics(t, ms.URL, "started", map[string]float64{
		"termgate_executions_running": 1, "termgate_executions_started_total": 1,
		"termgate_connections_open": 1, "termgate_sandbox_start_seconds_count": 1,
		`termgate_sandbox_start_seconds_bucket{le="+Inf"}`: 1,
	})

	c.send(t, wire.Request{Type: wire.TypeCancel, ID: "one"})
	c.expect(t, wire.MsgExit)
	wantMetrics(t, ms.URL, "ended", map[string]float64{
		"termgate_executions_running": 0, "termgate_executions_started_total": 1,
		`termgate_executions_ended_total{reason="cancelled",status="cancelled"}`: 1,
		`termgate_executions_ended_total{reason="exited",status="exited"}`:       0,
	})

	c.close()
	wantMetrics(t, ms.URL, "closed", map[string]float64{
		"termgate_connections_open": 0, `termgate_connections_closed_total{code="1000"}`: 1,
	})

	other, err := auth.New(auth.Config{HS256SecretFile: writeSecret(t, "another-secret-another-secret-another")})
	if err != nil {
		t.Fatal(err)
	}
	forged, err := other.Mint(auth.Claims{Subject: "mallory", Tenant: "acme", Scopes: map[string]bool{auth.ScopeAttach: true}, IssuedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	expired, err := e.authn.Mint(auth.Claims{Subject: "user-acme", Tenant: "acme", Scopes: map[string]bool{auth.ScopeAttach: true}, IssuedAt: time.Now().Add(-2 * time.Hour), ExpiresAt: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"not-a-jwt", "", forged, expired, e.token(t, "acme")} {
		if _, resp, err := e.dialRaw(tok, nil); err == nil || resp == nil || resp.StatusCode/100 != 4 {
			t.Fatalf("dial with token %.10q: %v (status %d), want a refusal", tok, err, status(resp))
		}
	}
	wantMetrics(t, ms.URL, "refused", map[string]float64{
		`termgate_auth_failures_total{reason="malformed"}`: 1,
		`termgate_auth_failures_total{reason="missing"}`:   1,
		`termgate_auth_failures_total{reason="signature"}`: 1,
		`termgate_auth_failures_total{reason="expired"}`:   1,
		`termgate_auth_failures_total{reason="scope"}`:     1,
	})
}

// writeSecret writes an HS256 secret file and returns its path.
func writeSecret(t testing.TB, secret string) string {
	t.Helper()
	p := filepath.Join(sandboxtest.Dir(t), "secret")
	if err := os.WriteFile(p, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMetricsPprofOnlyOnMetricsListener: the public handler serves
// neither /metrics nor /debug/pprof; the metrics handler serves both.
func TestMetricsPprofOnlyOnMetricsListener(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{}, nil)
	ms := httptest.NewServer(e.srv.MetricsHandler())
	defer ms.Close()
	get := func(url string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1", "/metrics"} {
		if code, _ := get(e.http.URL + p); code != http.StatusNotFound {
			t.Errorf("public listener GET %s: %d, want 404", p, code)
		}
		if code, body := get(ms.URL + p); code != http.StatusOK || body == "" {
			t.Errorf("metrics listener GET %s: %d, want 200 with a body", p, code)
		}
	}
}

// TestMetricLabelsBounded: whatever a client sends, the labels come from
// a small fixed set.
func TestMetricLabelsBounded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code int
		want string
	}{{-1, "none"}, {1000, "1000"}, {1012, "1012"}, {1015, "1015"}, {1016, "other"}, {3000, "other"},
		{4001, "4001"}, {4004, "4004"}, {4005, "other"}, {4999, "other"}, {999, "other"}} {
		if got := closeCodeLabel(tc.code); got != tc.want {
			t.Errorf("closeCodeLabel(%d) = %q, want %q", tc.code, got, tc.want)
		}
	}
	if got := authReason("x", errors.New("auth: unauthorized: audience")); got != authInvalid {
		t.Errorf("authReason(other) = %q, want %q", got, authInvalid)
	}
}

// TestMetricsAuditLost: records the audit trail could not write once
// nothing could be refused any more are a counter, so an operator is
// alerted to a hole in the trail; without a trail there is no series.
func TestMetricsAuditLost(t *testing.T) {
	t.Parallel()
	a, err := audit.Open(audit.Config{Path: filepath.Join(t.TempDir(), "audit.log")})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	e := newFakeEnv(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, func(c *Config) { c.Audit = a })
	ms := httptest.NewServer(e.srv.MetricsHandler())
	defer ms.Close()
	wantMetrics(t, ms.URL, "none lost", map[string]float64{"termgate_audit_lost_records_total": 0})
	a.Close() // a record of what happened cannot be written now: it is lost
	for range 3 {
		a.Happened(&audit.Record{Event: "end"})
	}
	wantMetrics(t, ms.URL, "three lost", map[string]float64{"termgate_audit_lost_records_total": 3})

	plain := newFakeEnv(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, nil)
	ps := httptest.NewServer(plain.srv.MetricsHandler())
	defer ps.Close()
	if _, ok := scrape(t, ps.URL)["termgate_audit_lost_records_total"]; ok {
		t.Error("a server without an audit trail has termgate_audit_lost_records_total")
	}
}

// TestMetricsGzip: a scraper that accepts gzip, as Prometheus does, gets
// the exposition gzipped; one that does not, plain.
func TestMetricsGzip(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, nil)
	ms := httptest.NewServer(e.srv.MetricsHandler())
	defer ms.Close()
	get := func(encoding string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodGet, ms.URL+"/metrics", nil)
		req.Header.Set("Accept-Encoding", encoding) // set by hand: the client does not undo the gzip
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}
	resp, plain := get("identity")
	if resp.Header.Get("Content-Encoding") != "" || !bytes.HasPrefix(plain, []byte("# HELP ")) {
		t.Errorf("identity: Content-Encoding %q, body %.40q", resp.Header.Get("Content-Encoding"), plain)
	}
	resp, zipped := get("gzip, deflate")
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("gzip: Content-Encoding %q", resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(zipped))
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil || !bytes.HasPrefix(unzipped, []byte("# HELP ")) || len(zipped) >= len(unzipped)/3 {
		t.Errorf("gzip: %v, %d bytes for %d, %.40q", err, len(zipped), len(unzipped), unzipped)
	}
}
