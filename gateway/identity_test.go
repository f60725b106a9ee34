package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session/sessiontest"
)

// TestReadyWaitsForTheFirstJWKSFetch: with a JWKS, the only key source,
// not fetched yet every
// token would be refused, so /readyz answers 503 until it is.
func TestReadyWaitsForTheFirstJWKSFetch(t *testing.T) {
	t.Parallel()
	var up atomic.Bool
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, `{"keys":[]}`)
	}))
	defer idp.Close()
	authn, err := auth.New(auth.Config{JWKSURLs: []string{idp.URL}, Audience: "termgate"})
	if err != nil {
		t.Fatal(err)
	}
	defer authn.Close()
	e := newFakeEnv(t, &sessiontest.Launcher{}, func(c *Config) { c.Auth = authn })
	ready := func() (int, string) {
		r, err := http.Get(e.http.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, "no verification keys yet") {
		t.Fatalf("before the first fetch: %d %q, want 503 saying no keys yet", code, body)
	}
	up.Store(true)
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool { code, _ := ready(); return code == http.StatusOK }) {
		code, body := ready()
		t.Fatalf("after the provider came up: %d %q, want 200", code, body)
	}
}

// TestReadyBesideAJWKSThatNeverAnswers: one key source with keys is
// enough: a JWKS on 127.0.0.1 that takes the connection and never
// answers keeps /readyz at 503 only while it is the only source; beside
// a secret file the gateway is ready and that file's tokens are served.
func TestReadyBesideAJWKSThatNeverAnswers(t *testing.T) {
	t.Parallel()
	stuck := make(chan struct{})
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stuck:
		}
	}))
	defer idp.Close()
	defer close(stuck)
	for _, c := range []struct {
		name   string
		secret bool
		want   int
	}{{"alone", false, http.StatusServiceUnavailable}, {"beside a secret", true, http.StatusOK}} {
		cfg := auth.Config{JWKSURLs: []string{idp.URL}, Audience: "termgate"}
		if c.secret {
			cfg.HS256SecretFile = writeIdentitySecret(t)
		}
		authn, err := auth.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer authn.Close()
		e := newFakeEnv(t, &sessiontest.Launcher{}, func(c *Config) { c.Auth = authn })
		r, err := http.Get(e.http.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != c.want {
			t.Errorf("%s: /readyz %d %q, want %d", c.name, r.StatusCode, b, c.want)
		}
		if !c.secret {
			continue
		}
		tok, err := authn.Mint(auth.Claims{Subject: "s", Tenant: "acme", ExpiresAt: time.Now().Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := authn.Verify(tok); err != nil {
			t.Errorf("%s: the secret's token refused: %v", c.name, err)
		}
	}
}

// TestAuthReasonTenant: a token refused for its tenant's binding counts
// under its own reason.
func TestAuthReasonTenant(t *testing.T) {
	t.Parallel()
	authn, err := auth.New(auth.Config{HS256SecretFile: "idp=" + writeIdentitySecret(t),
		TenantBindings: []auth.TenantBinding{{Source: "idp", Tenants: []string{"acme"}}}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := authn.Mint(auth.Claims{Subject: "s", Tenant: "beta", ExpiresAt: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = authn.Verify(tok)
	if got := authReason(tok, err); got != authTenant {
		t.Errorf("authReason(%v) = %q, want %q", err, got, authTenant)
	}
}

func writeIdentitySecret(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte("0123456789abcdef0123456789abcdef-identity"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
