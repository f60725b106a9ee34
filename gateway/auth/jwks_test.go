package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// jwksServer serves a JWK Set from 127.0.0.1 that a test changes, and
// counts the fetches.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	keys    []jwkset.JWKMarshal
	body    []byte // when set, served instead of keys
	status  int    // when set, answered instead
	chunked bool   // no Content-Length
	fetches atomic.Int64
}

func newJWKSServer(t *testing.T) *jwksServer {
	t.Helper()
	s := &jwksServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.status != 0 {
			w.WriteHeader(s.status)
			return
		}
		body := s.body
		if body == nil {
			body, _ = json.Marshal(jwkset.JWKSMarshal{Keys: s.keys})
		}
		w.Header().Set("Content-Type", "application/json")
		if !s.chunked {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		}
		w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

// set replaces the served keys: kid to public key.
func (s *jwksServer) set(t *testing.T, keys map[string]any) {
	t.Helper()
	var ms []jwkset.JWKMarshal
	for kid, k := range keys {
		jwk, err := jwkset.NewJWKFromKey(k, jwkset.JWKOptions{
			Metadata: jwkset.JWKMetadataOptions{KID: kid, USE: jwkset.UseSig},
			Marshal:  jwkset.JWKMarshalOptions{Private: true}, // a symmetric key is all private
		})
		if err != nil {
			t.Fatalf("JWK %s: %v", kid, err)
		}
		ms = append(ms, jwk.Marshal())
	}
	s.mu.Lock()
	s.keys, s.body, s.status = ms, nil, 0
	s.mu.Unlock()
}

func (s *jwksServer) serveBody(b []byte) {
	s.mu.Lock()
	s.body = b
	s.mu.Unlock()
}

// newJWKSAuth is an authenticator of cfg with the test clock, logging to
// the returned buffer, closed at the end of the test.
func newJWKSAuth(t *testing.T, cfg Config) (*Authenticator, *sandboxtest.SyncBuffer) {
	t.Helper()
	logs := &sandboxtest.SyncBuffer{}
	cfg.Now = func() time.Time { return testNow }
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.Audience == "" {
		cfg.Audience = testAudience
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	return a, logs
}

// waitReady waits until every JWKS was fetched once.
func waitReady(t *testing.T, a *Authenticator, logs *sandboxtest.SyncBuffer) {
	t.Helper()
	if !sandboxtest.Eventually(t, 20*time.Second, func() bool { return len(a.PendingJWKS()) == 0 }) {
		t.Fatalf("JWKS not fetched: %v; logs:\n%s", a.PendingJWKS(), logs)
	}
}

// accepts reports whether a verifies tok.
func accepts(a *Authenticator, tok string) bool {
	_, err := a.Verify(tok)
	return err == nil
}

func TestJWKSRotation(t *testing.T) {
	t.Parallel()
	ks := testKeys()
	srv := newJWKSServer(t)
	srv.set(t, map[string]any{"old": &ks.rsa.PublicKey})
	a, logs := newJWKSAuth(t, Config{JWKSURLs: []string{srv.URL}, JWKS: JWKSConfig{
		RefreshInterval: 50 * time.Millisecond, UnknownKIDInterval: time.Hour,
	}})
	waitReady(t, a, logs)
	oldTok := signTest(t, jwt.SigningMethodRS256, ks.rsa, "old", goodClaims(nil))
	newTok := signTest(t, jwt.SigningMethodES256, ks.ec, "new", goodClaims(nil))
	if c, err := a.Verify(oldTok); err != nil || c.Tenant != "acme" {
		t.Fatalf("the old key's token: %+v, %v", c, err)
	}
	// The provider adds a key, then removes the old one.
	srv.set(t, map[string]any{"old": &ks.rsa.PublicKey, "new": &ks.ec.PublicKey})
	if !sandboxtest.Eventually(t, 20*time.Second, func() bool { return accepts(a, newTok) }) {
		_, err := a.Verify(newTok)
		t.Fatalf("the new key's token is refused after a refresh: %v", err)
	}
	srv.set(t, map[string]any{"new": &ks.ec.PublicKey})
	if !sandboxtest.Eventually(t, 20*time.Second, func() bool { return !accepts(a, oldTok) }) {
		t.Fatal("the removed key's token is still accepted")
	}
	if _, err := a.Verify(oldTok); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "unknown kid") {
		t.Errorf("the removed key's token: %v, want unknown kid", err)
	}
	if !accepts(a, newTok) {
		t.Error("the new key's token is refused")
	}
	if !strings.Contains(logs.String(), `kids="[new old]"`) || !strings.Contains(logs.String(), "kids=[new]") {
		t.Errorf("the logs do not show the key sets:\n%s", logs)
	}
}

func TestJWKSUnknownKIDRefreshIsRateLimited(t *testing.T) {
	t.Parallel()
	ks := testKeys()
	srv := newJWKSServer(t)
	srv.set(t, map[string]any{"a": &ks.rsa.PublicKey})
	a, logs := newJWKSAuth(t, Config{JWKSURLs: []string{srv.URL}, JWKS: JWKSConfig{
		RefreshInterval: time.Hour, UnknownKIDInterval: time.Hour,
	}})
	waitReady(t, a, logs)
	if n := srv.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches at start, want 1", n)
	}
	// A token of a key published since: one refresh, then accepted.
	srv.set(t, map[string]any{"a": &ks.rsa.PublicKey, "b": &ks.ec.PublicKey})
	if _, err := a.Verify(signTest(t, jwt.SigningMethodES256, ks.ec, "b", goodClaims(nil))); err != nil {
		t.Fatalf("a token of a new key: %v", err)
	}
	if n := srv.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches after an unknown kid, want 2", n)
	}
	// More unknown kids within the interval: refused, no fetch.
	srv.set(t, map[string]any{"a": &ks.rsa.PublicKey, "b": &ks.ec.PublicKey, "c": ks.ed.Public()})
	for _, kid := range []string{"c", "made-up", "c"} {
		if _, err := a.Verify(signTest(t, jwt.SigningMethodEdDSA, ks.ed, kid, goodClaims(nil))); err == nil {
			t.Fatalf("kid %s accepted without a refresh", kid)
		}
	}
	if n := srv.fetches.Load(); n != 2 {
		t.Errorf("%d fetches after more unknown kids within the interval, want still 2", n)
	}
}

func TestJWKSRefusesOversizeSets(t *testing.T) {
	t.Parallel()
	ks := testKeys()
	keys := map[string]any{"a": &ks.rsa.PublicKey, "b": &ks.ec.PublicKey, "c": ks.ed.Public()}
	big := []byte(`{"keys":[],"pad":"` + strings.Repeat("x", 64<<10) + `"}`)
	tests := []struct {
		name    string
		cfg     JWKSConfig
		body    []byte
		chunked bool
		want    string
	}{
		{"Content-Length over MaxBytes", JWKSConfig{MaxBytes: 32 << 10}, big, false, "of " + strconv.Itoa(len(big)) + " bytes, larger than 32768 bytes"},
		{"body over MaxBytes", JWKSConfig{MaxBytes: 32 << 10}, big, true, "response larger than 32768 bytes"},
		{"more keys than MaxKeys", JWKSConfig{MaxKeys: 2}, nil, false, "3 keys, more than 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newJWKSServer(t)
			srv.set(t, keys)
			srv.serveBody(tt.body)
			srv.chunked = tt.chunked
			tt.cfg.RefreshInterval = time.Hour
			a, logs := newJWKSAuth(t, Config{JWKSURLs: []string{srv.URL}, JWKS: tt.cfg})
			if !sandboxtest.Eventually(t, 20*time.Second, func() bool { return strings.Contains(logs.String(), tt.want) }) {
				t.Fatalf("logs do not say %q:\n%s", tt.want, logs)
			}
			if a.Ready() == nil {
				t.Error("ready with the set refused")
			}
			if accepts(a, signTest(t, jwt.SigningMethodRS256, ks.rsa, "a", goodClaims(nil))) {
				t.Error("a key of the refused set verified a token")
			}
		})
	}
}

// TestJWKSRefreshFailureKeepsKeys: a refresh that fails (an oversize
// set, then an error status) leaves the keys held in use.
func TestJWKSRefreshFailureKeepsKeys(t *testing.T) {
	t.Parallel()
	ks := testKeys()
	srv := newJWKSServer(t)
	srv.set(t, map[string]any{"a": &ks.rsa.PublicKey})
	a, logs := newJWKSAuth(t, Config{JWKSURLs: []string{srv.URL}, JWKS: JWKSConfig{RefreshInterval: 50 * time.Millisecond, MaxBytes: 16 << 10}})
	waitReady(t, a, logs)
	tok := signTest(t, jwt.SigningMethodRS256, ks.rsa, "a", goodClaims(nil))
	srv.serveBody([]byte(`{"keys":[],"pad":"` + strings.Repeat("x", 32<<10) + `"}`))
	if !sandboxtest.Eventually(t, 20*time.Second, func() bool { return strings.Contains(logs.String(), "larger than 16384 bytes") }) {
		t.Fatalf("no refresh refused:\n%s", logs)
	}
	if !accepts(a, tok) {
		t.Error("an oversize refresh dropped the keys held")
	}
	srv.mu.Lock()
	srv.status = http.StatusInternalServerError
	srv.mu.Unlock()
	if !sandboxtest.Eventually(t, 20*time.Second, func() bool { return strings.Contains(logs.String(), "500") }) {
		t.Fatalf("no refresh failed:\n%s", logs)
	}
	if !accepts(a, tok) || a.Ready() != nil {
		t.Errorf("a failed refresh dropped the keys held (ready: %v)", a.Ready())
	}
}

func TestJWKSURLMustBeHTTPSOrLoopback(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"http://idp.example/jwks.json", "http://10.0.0.1/jwks", "http://localhost/jwks",
		"http://[::ffff:10.0.0.1]/jwks", "ftp://127.0.0.1/jwks", "https:///jwks", "127.0.0.1/jwks",
	} {
		_, err := New(Config{JWKSURLs: []string{u}, Audience: testAudience})
		if err == nil {
			t.Errorf("%s accepted", u)
		} else if !errors.Is(err, ErrJWKSURL) && !strings.Contains(err.Error(), "JWKS URL") {
			t.Errorf("%s: %v, want ErrJWKSURL", u, err)
		}
	}
	for _, u := range []string{"https://idp.example/jwks.json", "http://127.0.0.1:1/jwks", "http://127.9.9.9:1/jwks", "http://[::1]:1/jwks"} {
		a, err := New(Config{JWKSURLs: []string{u}, Audience: testAudience})
		if err != nil {
			t.Errorf("%s: %v", u, err)
			continue
		}
		a.Close()
	}
	if _, err := New(Config{JWKSURLs: []string{"https://idp.example/jwks.json"}}); err == nil || !strings.Contains(err.Error(), "audience") {
		t.Errorf("JWKS without audience: %v, want refused", err)
	}
}

// TestJWKSRedirectMustBeHTTPSOrLoopback: a redirect to clear text off
// this host is not followed.
func TestJWKSRedirectMustBeHTTPSOrLoopback(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.RedirectHandler("http://idp.example/jwks.json", http.StatusFound))
	t.Cleanup(srv.Close)
	a, logs := newJWKSAuth(t, Config{JWKSURLs: []string{srv.URL}})
	if !sandboxtest.Eventually(t, 20*time.Second, func() bool { return strings.Contains(logs.String(), "must be https") }) {
		t.Fatalf("redirect not refused:\n%s", logs)
	}
	if a.Ready() == nil {
		t.Error("ready after a refused redirect")
	}
}

// TestJWKSStartsUnreadyAndRetries: a provider down at start leaves the
// authenticator unready, not failed, until a retry fetches the set.
func TestJWKSStartsUnreadyAndRetries(t *testing.T) {
	t.Parallel()
	ks := testKeys()
	srv := newJWKSServer(t)
	srv.set(t, map[string]any{"a": &ks.rsa.PublicKey})
	srv.mu.Lock()
	srv.status = http.StatusServiceUnavailable
	srv.mu.Unlock()
	a, logs := newJWKSAuth(t, Config{JWKSURLs: []string{srv.URL}})
	if !sandboxtest.Eventually(t, 20*time.Second, func() bool { return srv.fetches.Load() >= 1 }) {
		t.Fatal("never fetched")
	}
	if err := a.Ready(); err == nil || !strings.Contains(err.Error(), srv.URL) {
		t.Fatalf("Ready = %v with the provider down, want an error naming it", err)
	}
	tok := signTest(t, jwt.SigningMethodRS256, ks.rsa, "a", goodClaims(nil))
	if accepts(a, tok) {
		t.Fatal("accepted a token before any key was fetched")
	}
	srv.set(t, map[string]any{"a": &ks.rsa.PublicKey})
	waitReady(t, a, logs)
	if !accepts(a, tok) {
		t.Error("refused after the retry fetched the key")
	}
}

// TestJWKSKeysAreCheckedAsFilesAre: the algorithm allow-list holds for
// JWKS keys: no symmetric key (an HS256 token "signed" with a published
// key), no RSA under 2048 bits, no algorithm but the key's own.
func TestJWKSKeysAreCheckedAsFilesAre(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	ks := f.keys
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sym := []byte(strings.Repeat("s", 32))
	srv := newJWKSServer(t)
	srv.set(t, map[string]any{"sym": sym, "small": &small.PublicKey, "p384": &p384.PublicKey, "ec": &ks.ec.PublicKey, "ed": ks.ed.Public()})
	// The secret file makes HS256 an algorithm the parser allows.
	a, logs := newJWKSAuth(t, Config{HS256SecretFile: f.secretFile, JWKSURLs: []string{srv.URL}, JWKS: JWKSConfig{UnknownKIDInterval: time.Hour}})
	waitReady(t, a, logs)
	good := goodClaims(nil)
	tests := []struct {
		name, tok, want string
	}{
		{"symmetric key", signTest(t, jwt.SigningMethodHS256, sym, "sym", good), "unsupported key type"},
		{"RSA 1024", signTest(t, jwt.SigningMethodRS256, small, "small", good), "1024 bits"},
		{"P-384", signTest(t, jwt.SigningMethodES384, p384, "p384", good), "signing method"},
		{"EdDSA token, ES256 key", signTest(t, jwt.SigningMethodEdDSA, ks.ed, "ec", good), "does not match"},
		{"no kid", signTest(t, jwt.SigningMethodES256, ks.ec, "", good), "no kid"},
	}
	for _, tt := range tests {
		_, err := a.Verify(tt.tok)
		if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want it refused saying %q", tt.name, err, tt.want)
		}
	}
	for kid, tok := range map[string]string{
		"ed": signTest(t, jwt.SigningMethodEdDSA, ks.ed, "ed", good),
		"ec": signTest(t, jwt.SigningMethodES256, ks.ec, "ec", good),
		"hs": signTest(t, jwt.SigningMethodHS256, f.secret, "hs", good),
	} {
		if _, err := a.Verify(tok); err != nil {
			t.Errorf("kid %s: %v", kid, err)
		}
	}
	_ = ed25519.PublicKeySize
}

// TestJWKSFetchTimesOut: a provider that never answers is given up on
// after Timeout, and retried.
func TestJWKSFetchTimesOut(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		<-r.Context().Done() // until the client gives up
	}))
	t.Cleanup(srv.Close)
	a, logs := newJWKSAuth(t, Config{JWKSURLs: []string{srv.URL}, JWKS: JWKSConfig{Timeout: 200 * time.Millisecond}})
	if !sandboxtest.Eventually(t, 20*time.Second, func() bool { return hits.Load() >= 2 }) {
		t.Fatalf("no retry after a fetch timed out:\n%s", logs)
	}
	// The client's deadline or the transport's header timeout, whichever
	// the scheduler lets fire first: both say so, in their own words.
	if l := strings.ToLower(logs.String()); !strings.Contains(l, "timeout") && !strings.Contains(l, "deadline") {
		t.Errorf("the logs do not say the fetch timed out:\n%s", logs)
	}
	if a.Ready() == nil {
		t.Error("ready without a fetch")
	}
}

// TestJWKSRedirectsAreBounded: a provider redirecting in a loop is given
// up on after 3 redirects.
func TestJWKSRedirectsAreBounded(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, "/again", http.StatusFound)
	}))
	t.Cleanup(srv.Close)
	a, logs := newJWKSAuth(t, Config{JWKSURLs: []string{srv.URL}})
	if !sandboxtest.Eventually(t, 20*time.Second, func() bool { return strings.Contains(logs.String(), "more than 3 redirects") }) {
		t.Fatalf("a redirect loop not given up on:\n%s", logs)
	}
	if n := hits.Load(); n != 4 {
		t.Errorf("%d requests in the first fetch, want 4 (the URL and 3 redirects)", n)
	}
	if a.Ready() == nil {
		t.Error("ready after a redirect loop")
	}
}

// TestJWKSThatNeverAnswersLeavesTheOtherSourcesReady: Ready needs one key
// source with keys; a JWKS that takes the connection and never answers
// is logged as such within a few seconds, and its tokens alone are
// refused.
func TestJWKSThatNeverAnswersLeavesTheOtherSourcesReady(t *testing.T) {
	t.Parallel()
	stuck := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stuck:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stuck) })
	secret := writeSecretMode(t, t.TempDir(), "secret", 0o600)
	a, logs := newJWKSAuth(t, Config{HS256SecretFile: secret, JWKSURLs: []string{srv.URL}})
	if err := a.Ready(); err != nil {
		t.Errorf("Ready = %v with a secret file beside a JWKS not fetched", err)
	}
	if p := a.PendingJWKS(); len(p) != 1 || p[0] != srv.URL {
		t.Errorf("PendingJWKS = %v, want the JWKS", p)
	}
	if !sandboxtest.Eventually(t, 20*time.Second, func() bool {
		return strings.Contains(logs.String(), "JWKS has not answered yet") && strings.Contains(logs.String(), srv.URL)
	}) {
		t.Errorf("no warning that the JWKS has not answered:\n%s", logs)
	}
	alone, _ := newJWKSAuth(t, Config{JWKSURLs: []string{srv.URL}})
	if err := alone.Ready(); err == nil || !strings.Contains(err.Error(), srv.URL) {
		t.Errorf("Ready = %v with the JWKS as the only source, want an error naming it", err)
	}
}

// onMessage is a slog handler that calls fn, in the logging goroutine,
// for each record of message msg.
type onMessage struct {
	slog.Handler
	msg string
	fn  func()
}

func (h onMessage) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.fn()
	}
	return h.Handler.Handle(ctx, r)
}

// TestJWKSKeysLoggedOnlyOnceInUse: "JWKS keys" tells an operator that
// tokens of those keys are accepted, so a token verified when the line
// is written is accepted.
func TestJWKSKeysLoggedOnlyOnceInUse(t *testing.T) {
	t.Parallel()
	ks := testKeys()
	srv := newJWKSServer(t)
	srv.set(t, map[string]any{"k": &ks.rsa.PublicKey})
	tok := signTest(t, jwt.SigningMethodRS256, ks.rsa, "k", goodClaims(nil))
	var a atomic.Pointer[Authenticator]
	made := make(chan struct{})
	var logged, refused atomic.Int64
	logs := &sandboxtest.SyncBuffer{}
	h := onMessage{Handler: slog.NewTextHandler(logs, nil), msg: "JWKS keys", fn: func() {
		logged.Add(1)
		select {
		case <-made:
		case <-time.After(10 * time.Second):
		}
		if a.Load() == nil || !accepts(a.Load(), tok) {
			refused.Add(1)
		}
	}}
	cfg := Config{JWKSURLs: []string{srv.URL}, Audience: testAudience, Logger: slog.New(h),
		Now: func() time.Time { return testNow }}
	au, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	a.Store(au)
	close(made)
	t.Cleanup(func() { au.Close() })
	if !sandboxtest.Eventually(t, 20*time.Second, func() bool { return logged.Load() > 0 }) {
		t.Fatalf("the keys were never logged:\n%s", logs)
	}
	if n := refused.Load(); n != 0 {
		t.Errorf("a token of the logged keys was refused while the line was written (%d of %d times)", n, logged.Load())
	}
}
