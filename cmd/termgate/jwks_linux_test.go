package main

import (
	"crypto/ecdsa"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// jwksOf is the JWK Set of keys, by kid.
func jwksOf(t *testing.T, keys map[string]*ecdsa.PrivateKey) []byte {
	t.Helper()
	var set jwkset.JWKSMarshal
	for kid, k := range keys {
		jwk, err := jwkset.NewJWKFromKey(&k.PublicKey, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, USE: jwkset.UseSig}})
		if err != nil {
			t.Fatal(err)
		}
		set.Keys = append(set.Keys, jwk.Marshal())
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestServeWithJWKS: a serve process with a key file and a JWKS served
// from 127.0.0.1 starts while the provider is down, ready on the key
// file alone, whose tokens are accepted; once the first fetch succeeds
// the JWKS's are too, and a key the provider
// adds later is fetched when a token names it.
func TestServeWithJWKS(t *testing.T) {
	serveFromEnv()
	t.Parallel()
	var mu sync.Mutex
	var body []byte // nil: the provider is down
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if body == nil {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Write(body)
	}))
	defer idp.Close()
	fileKey, idpKey, laterKey := newECKey(t), newECKey(t), newECKey(t)
	keyPath := filepath.Join(t.TempDir(), "file.pem")
	writePublicKey(t, keyPath, fileKey)
	n := newDurableNode(t, "--jwt-public-key", keyPath, "--jwt-jwks-url", idp.URL, "--jwt-audience", reloadAudience)
	n.start()
	readyz := func() (int, string) {
		r, err := http.Get("http://" + n.addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	if code, msg := readyz(); code != http.StatusOK {
		t.Fatalf("/readyz with the provider down beside a key file: %d %q, want 200", code, msg)
	}
	if _, err := n.dialToken(t, signES256(t, fileKey, "file")); err != nil {
		t.Errorf("the key file's token while the provider is down: %v", err)
	}
	if _, err := n.dialToken(t, signES256(t, idpKey, "idp-1")); err == nil {
		t.Error("a JWKS key's token accepted before the JWKS was fetched")
	}
	mu.Lock()
	body = jwksOf(t, map[string]*ecdsa.PrivateKey{"idp-1": idpKey})
	mu.Unlock()
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool { return strings.Contains(n.logs.String(), `"msg":"JWKS keys"`) }) {
		t.Fatalf("the JWKS was not fetched after the provider came up:\n%s", n.logs)
	}
	if _, err := n.dialToken(t, signES256(t, idpKey, "idp-1")); err != nil {
		t.Errorf("the JWKS key's token: %v", err)
	}
	mu.Lock()
	body = jwksOf(t, map[string]*ecdsa.PrivateKey{"idp-1": idpKey, "idp-2": laterKey})
	mu.Unlock()
	if _, err := n.dialToken(t, signES256(t, laterKey, "idp-2")); err != nil {
		t.Errorf("a token of a key the provider added since: %v", err)
	}
	if _, err := n.dialToken(t, signES256(t, newECKey(t), "idp-3")); err == nil {
		t.Error("a token of an unknown key accepted")
	}
}

// TestServeReadyBesideAJWKSThatNeverAnswers: a JWKS URL that accepts
// connections and never answers keeps out only its own tokens: serve is
// ready on its other key sources (a public key file), whose tokens work,
// and says at startup that the JWKS has not answered.
func TestServeReadyBesideAJWKSThatNeverAnswers(t *testing.T) {
	serveFromEnv()
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
	fileKey := newECKey(t)
	keyPath := filepath.Join(t.TempDir(), "file.pem")
	writePublicKey(t, keyPath, fileKey)
	n := newDurableNode(t, "--jwt-public-key", keyPath, "--jwt-jwks-url", idp.URL, "--jwt-audience", reloadAudience)
	n.start()
	readyz := func() (int, string) {
		r, err := http.Get("http://" + n.addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	if !sandboxtest.Eventually(t, 20*time.Second, func() bool { code, _ := readyz(); return code == http.StatusOK }) {
		code, msg := readyz()
		t.Fatalf("/readyz with a working key file beside a JWKS that never answers: %d %q, want 200", code, msg)
	}
	if _, err := n.dialToken(t, signES256(t, fileKey, "file")); err != nil {
		t.Errorf("a token of the key file: %v", err)
	}
	if !sandboxtest.Eventually(t, 20*time.Second, func() bool {
		return strings.Contains(n.logs.String(), "JWKS has not answered") && strings.Contains(n.logs.String(), idp.URL)
	}) {
		t.Errorf("serve did not say that the JWKS has not answered:\n%s", n.logs)
	}
}
