package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// TestReloadReplacesTheKeysWhole: Reload takes new key files as a whole,
// and keeps the keys in use when any file is bad: never a half-applied
// set.
func TestReloadReplacesTheKeysWhole(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	ks := f.keys
	next, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	a := newTestAuth(t, Config{HS256SecretFile: f.secretFile, PublicKeyFiles: []string{"idp=" + f.rsaFile, f.ecFile}, Audience: testAudience})
	good := goodClaims(nil)
	rsaTok := signTest(t, jwt.SigningMethodRS256, ks.rsa, "idp", good)
	ecTok := signTest(t, jwt.SigningMethodES256, ks.ec, "ec", good)
	nextTok := signTest(t, jwt.SigningMethodES256, next, "idp", good)
	hsTok := signTest(t, jwt.SigningMethodHS256, f.secret, "hs", good)
	want := func(what string, tok string, ok bool) {
		t.Helper()
		if _, err := a.Verify(tok); (err == nil) != ok {
			t.Errorf("%s: Verify = %v, want accepted %v", what, err, ok)
		}
	}
	want("the RSA key", rsaTok, true)
	want("the next key before the reload", nextTok, false)

	// A good reload: the idp key is now the P-256 one.
	writeTestFile(t, f.dir, "rsa.pem", publicPEM(t, &next.PublicKey))
	kids, err := a.Reload()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(kids, []string{"ec", "hs", "idp"}) {
		t.Errorf("reload kids %v, want [ec hs idp]", kids)
	}
	want("the next key", nextTok, true)
	want("the replaced RSA key", rsaTok, false)
	want("the unchanged EC key", ecTok, true)

	// A bad reload: the idp file is good again, the EC one is garbage, so
	// nothing changes.
	writeTestFile(t, f.dir, "rsa.pem", f.rsaPEM)
	writeTestFile(t, f.dir, "ec.pem", []byte("not a key\n"))
	if _, err := a.Reload(); err == nil || !strings.Contains(err.Error(), f.ecFile) {
		t.Fatalf("reload with a garbage file: %v, want an error naming it", err)
	}
	want("the next key after a failed reload", nextTok, true)
	want("the RSA key of the failed reload", rsaTok, false)
	want("the EC key after a failed reload", ecTok, true)

	// A secret others may read is refused on reload too.
	writeTestFile(t, f.dir, "ec.pem", publicPEM(t, &ks.ec.PublicKey))
	if err := os.Chmod(f.secretFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Reload(); err == nil || !strings.Contains(err.Error(), "mode 0644") {
		t.Fatalf("reload with a readable secret: %v", err)
	}
	want("the secret after a failed reload", hsTok, true)
	want("the next key after a failed reload", nextTok, true)
	if err := os.Chmod(f.secretFile, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(f.secretFile)
	if _, err := a.Reload(); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reload with the secret gone: %v", err)
	}
	want("the secret after its file went", hsTok, true)
	// Mint goes on with the secret in use.
	if _, err := a.Mint(Claims{Subject: "s", Tenant: "acme", ExpiresAt: testNow.Add(60e9)}); err != nil {
		t.Errorf("Mint after a failed reload: %v", err)
	}
}
