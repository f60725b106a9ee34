package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

const (
	testIssuer   = "termgate-test-issuer"
	testAudience = "termgate-test"
)

// testNow is the fixed clock of every test authenticator.
var testNow = time.Unix(1_750_000_000, 0)

// testKeys are generated once: RSA key generation is slow under -race.
var testKeys = sync.OnceValue(func() testKeySet {
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	var ks testKeySet
	var err error
	ks.rsa, err = rsa.GenerateKey(rand.Reader, 2048)
	must(err)
	ks.rsaOther, err = rsa.GenerateKey(rand.Reader, 2048)
	must(err)
	ks.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	_, ks.ed, err = ed25519.GenerateKey(rand.Reader)
	must(err)
	return ks
})

type testKeySet struct {
	rsa, rsaOther *rsa.PrivateKey
	ec            *ecdsa.PrivateKey
	ed            ed25519.PrivateKey
}

// authFixture holds key files in a temporary directory (kids "hs", "rsa",
// "ec", "ed") and authenticators built from them.
type authFixture struct {
	keys                                testKeySet
	dir                                 string
	secret                              []byte
	secretFile, rsaFile, ecFile, edFile string
	rsaPEM                              []byte
	all                                 *Authenticator // every key, issuer and audience required
	hsOnly                              *Authenticator // the HS256 secret alone, no issuer or audience
	rsaOnly                             *Authenticator // the RSA key alone and the audience, no issuer
}

func newAuthFixture(t testing.TB) *authFixture {
	t.Helper()
	// Hex, so the secret never ends in a byte the file's line ending
	// trimming would take.
	raw := make([]byte, 32)
	rand.Read(raw)
	f := &authFixture{keys: testKeys(), dir: t.TempDir(), secret: []byte(hex.EncodeToString(raw))}
	f.secretFile = writeTestFile(t, f.dir, "hs.key", append(append([]byte{}, f.secret...), '\n'))
	f.rsaPEM = publicPEM(t, &f.keys.rsa.PublicKey)
	f.rsaFile = writeTestFile(t, f.dir, "rsa.pem", f.rsaPEM)
	f.ecFile = writeTestFile(t, f.dir, "ec.pem", publicPEM(t, &f.keys.ec.PublicKey))
	f.edFile = writeTestFile(t, f.dir, "ed.pem", publicPEM(t, f.keys.ed.Public()))
	f.all = newTestAuth(t, Config{
		HS256SecretFile: f.secretFile,
		PublicKeyFiles:  []string{f.rsaFile, f.ecFile, f.edFile},
		Issuer:          testIssuer,
		Audience:        testAudience,
	})
	f.hsOnly = newTestAuth(t, Config{HS256SecretFile: f.secretFile})
	f.rsaOnly = newTestAuth(t, Config{PublicKeyFiles: []string{f.rsaFile}, Audience: testAudience})
	return f
}

func newTestAuth(t testing.TB, cfg Config) *Authenticator {
	t.Helper()
	cfg.Now = func() time.Time { return testNow }
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return a
}

func writeTestFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeSecretMode writes a valid secret with mode perm, umask aside.
func writeSecretMode(t testing.TB, dir, name string, perm os.FileMode) string {
	t.Helper()
	path := writeTestFile(t, dir, name, []byte(strings.Repeat("k", 32)))
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSecretOwnedByAnotherUserIsRefused: like ssh with a private key, a
// secret another user owns could have been written by them.
func TestSecretOwnedByAnotherUserIsRefused(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedRoot(t) // to give a file away
	path := writeSecretMode(t, t.TempDir(), "theirs.key", 0o600)
	if err := os.Chown(path, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	_, err := New(Config{HS256SecretFile: path})
	if err == nil {
		t.Fatal("a secret owned by uid 4242 was accepted")
	}
	for _, w := range []string{path, "owned by uid 4242", "not uid 0"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q, want it to name %q", err, w)
		}
	}
}

func publicPEM(t testing.TB, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// goodClaims are claims f.all accepts, edited by edit.
func goodClaims(edit func(jwt.MapClaims)) jwt.MapClaims {
	m := jwt.MapClaims{
		"sub":    "alice",
		"tenant": "acme",
		"scope":  "exec:create exec:attach",
		"iat":    testNow.Add(-time.Minute).Unix(),
		"exp":    testNow.Add(10 * time.Minute).Unix(),
		"iss":    testIssuer,
		"aud":    testAudience,
	}
	if edit != nil {
		edit(m)
	}
	return m
}

// signTest signs m with method and key; kid "" means no kid header, and
// extra headers are added as given.
func signTest(t testing.TB, method jwt.SigningMethod, key any, kid string, m jwt.MapClaims, extra ...map[string]any) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, m)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	for _, h := range extra {
		maps.Copy(tok.Header, h)
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatalf("sign %s: %v", method.Alg(), err)
	}
	return s
}

func b64JSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// withPart replaces part i (0 header, 1 payload, 2 signature) of token.
func withPart(token string, i int, part string) string {
	parts := strings.Split(token, ".")
	parts[i] = part
	return strings.Join(parts, ".")
}

func TestVerifyRefuses(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	hs := func(kid string, m jwt.MapClaims) string { return signTest(t, jwt.SigningMethodHS256, f.secret, kid, m) }
	good := hs("hs", goodClaims(nil))
	tests := []struct {
		name  string
		auth  *Authenticator // nil means f.all
		token string
		why   string // expected in the log reason
	}{
		{"alg none", nil, b64JSON(t, map[string]any{"alg": "none", "typ": "JWT"}) + "." + b64JSON(t, goodClaims(nil)) + ".", "signing method none is invalid"},
		{"alg none with kid", nil, b64JSON(t, map[string]any{"alg": "none", "kid": "hs"}) + "." + b64JSON(t, goodClaims(nil)) + ".", "signing method none is invalid"},
		{"alg none, single key", f.hsOnly, b64JSON(t, map[string]any{"alg": "none"}) + "." + b64JSON(t, goodClaims(nil)) + ".", "signing method none is invalid"},
		{"HS256 keyed with RSA PEM, RSA kid", nil, signTest(t, jwt.SigningMethodHS256, f.rsaPEM, "rsa", goodClaims(nil)), "algorithm does not match the key"},
		{"HS256 keyed with RSA PEM, no kid", nil, signTest(t, jwt.SigningMethodHS256, f.rsaPEM, "", goodClaims(nil)), "no kid and several keys"},
		{"HS256 keyed with RSA PEM, no kid, RSA only", f.rsaOnly, signTest(t, jwt.SigningMethodHS256, f.rsaPEM, "", goodClaims(nil)), "signing method HS256 is invalid"},
		{"HS256 with empty key", nil, signTest(t, jwt.SigningMethodHS256, []byte{}, "hs", goodClaims(nil)), "signature is invalid"},
		{"HS256 with empty key, no kid", f.hsOnly, signTest(t, jwt.SigningMethodHS256, []byte{}, "", goodClaims(nil)), "signature is invalid"},
		{"HS384 with the secret", nil, signTest(t, jwt.SigningMethodHS384, f.secret, "hs", goodClaims(nil)), "signing method HS384 is invalid"},
		{"ES256 to the RSA kid", nil, signTest(t, jwt.SigningMethodES256, f.keys.ec, "rsa", goodClaims(nil)), "algorithm does not match the key"},
		{"EdDSA to the EC kid", nil, signTest(t, jwt.SigningMethodEdDSA, f.keys.ed, "ec", goodClaims(nil)), "algorithm does not match the key"},
		{"RS256 by another key", nil, signTest(t, jwt.SigningMethodRS256, f.keys.rsaOther, "rsa", goodClaims(nil)), "verification error"},
		{"unknown kid", nil, hs("nope", goodClaims(nil)), "unknown kid"},
		{"kid not a string", nil, signTest(t, jwt.SigningMethodHS256, f.secret, "", goodClaims(nil), map[string]any{"kid": 7}), "kid is not a string"},
		{"crit header", nil, signTest(t, jwt.SigningMethodHS256, f.secret, "hs", goodClaims(nil), map[string]any{"crit": []string{"exp"}}), "crit header"},
		{"tampered signature", nil, withPart(good, 2, flipChar(strings.Split(good, ".")[2], 10)), "signature is invalid"},
		{"tampered payload", nil, withPart(good, 1, b64JSON(t, goodClaims(func(m jwt.MapClaims) { m["tenant"] = "other" }))), "signature is invalid"},
		{"signature with non-zero padding bits", nil, withPart(good, 2, setPaddingBit(strings.Split(good, ".")[2])), "illegal base64"},
		{"oversized", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { m["pad"] = strings.Repeat("x", wire.MaxTokenBytes) })), "longer than"},
		{"no exp", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { delete(m, "exp") })), "exp claim is required"},
		{"expired beyond leeway", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { m["exp"] = testNow.Add(-31 * time.Second).Unix() })), "token is expired"},
		{"exp not a number", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { m["exp"] = "tomorrow" })), "invalid type"},
		{"nbf in the future", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { m["nbf"] = testNow.Add(31 * time.Second).Unix() })), "token is not valid yet"},
		{"iat in the future", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { m["iat"] = testNow.Add(31 * time.Second).Unix() })), "token used before issued"},
		{"no iat", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { delete(m, "iat") })), "iat claim is required"},
		{"lifetime over the maximum", nil, hs("hs", goodClaims(func(m jwt.MapClaims) {
			m["iat"] = testNow.Add(-time.Hour).Unix()
			m["exp"] = testNow.Add(23*time.Hour + time.Second).Unix()
		})), "lifetime"},
		{"exp before iat", nil, hs("hs", goodClaims(func(m jwt.MapClaims) {
			m["iat"] = testNow.Add(20 * time.Second).Unix()
			m["exp"] = testNow.Add(10 * time.Second).Unix()
		})), "lifetime"},
		{"wrong iss", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { m["iss"] = "someone-else" })), "invalid issuer"},
		{"no iss", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { delete(m, "iss") })), "iss claim is required"},
		{"wrong aud", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { m["aud"] = "other-service" })), "invalid audience"},
		{"wrong aud list", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { m["aud"] = []string{"a", "b"} })), "invalid audience"},
		{"no aud", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { delete(m, "aud") })), "aud claim is required"},
		{"missing sub", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { delete(m, "sub") })), "sub claim"},
		{"empty sub", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { m["sub"] = "" })), "sub claim"},
		{"sub not a string", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { m["sub"] = 42 })), "sub claim"},
		{"missing tenant", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { delete(m, "tenant") })), "tenant claim"},
		{"tenant ../x", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { m["tenant"] = "../x" })), "tenant claim"},
		{"tenant A", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { m["tenant"] = "A" })), "tenant claim"},
		{"tenant empty", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { m["tenant"] = "" })), "tenant claim"},
		{"tenant a/b", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { m["tenant"] = "a/b" })), "tenant claim"},
		{"tenant 64 chars", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { m["tenant"] = strings.Repeat("a", 64) })), "tenant claim"},
		{"tenant not a string", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { m["tenant"] = 5 })), "tenant claim"},
		{"scope not a string", nil, hs("hs", goodClaims(func(m jwt.MapClaims) { m["scope"] = []string{ScopeCreate} })), "scope claim"},
		{"empty", nil, "", "invalid number of segments"},
		{"two segments", nil, "a.b", "invalid number of segments"},
		{"four segments", nil, good + ".x", "invalid number of segments"},
		{"garbage", nil, "not.a.token", "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := tt.auth
			if a == nil {
				a = f.all
			}
			c, err := a.Verify(tt.token)
			if err == nil {
				t.Fatalf("Verify accepted the token: %+v", c)
			}
			if !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("error %v does not wrap ErrUnauthorized", err)
			}
			if !strings.Contains(err.Error(), tt.why) {
				t.Errorf("error %q, want it to say %q", err, tt.why)
			}
			if !c.ExpiresAt.IsZero() || c.Subject != "" || c.Scopes != nil {
				t.Errorf("refused token returned claims %+v", c)
			}
		})
	}
}

// flipChar changes the base64url character at i to another one.
func flipChar(s string, i int) string {
	b := []byte(s)
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// setPaddingBit sets the lowest bit of the last character of an unpadded
// base64url segment whose length leaves unused bits; lenient decoders ignore
// it, so without strict decoding a token would have several spellings.
func setPaddingBit(seg string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, seg[len(seg)-1])
	return seg[:len(seg)-1] + string(alphabet[i|1])
}

func TestVerifyAccepts(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	renamed := newTestAuth(t, Config{
		PublicKeyFiles: []string{"signer=" + f.rsaFile},
		Audience:       testAudience,
		TenantClaim:    "org",
	})
	hs := func(m jwt.MapClaims) string { return signTest(t, jwt.SigningMethodHS256, f.secret, "hs", m) }
	tests := []struct {
		name   string
		auth   *Authenticator // nil means f.all
		token  string
		scopes []string
	}{
		{"HS256 with its kid", nil, hs(goodClaims(nil)), []string{ScopeCreate, ScopeAttach}},
		{"RS256 with its kid", nil, signTest(t, jwt.SigningMethodRS256, f.keys.rsa, "rsa", goodClaims(nil)), []string{ScopeCreate, ScopeAttach}},
		{"ES256 with its kid", nil, signTest(t, jwt.SigningMethodES256, f.keys.ec, "ec", goodClaims(nil)), []string{ScopeCreate, ScopeAttach}},
		{"EdDSA with its kid", nil, signTest(t, jwt.SigningMethodEdDSA, f.keys.ed, "ed", goodClaims(nil)), []string{ScopeCreate, ScopeAttach}},
		{"HS256 without kid, only key", f.hsOnly, signTest(t, jwt.SigningMethodHS256, f.secret, "", goodClaims(nil)), []string{ScopeCreate, ScopeAttach}},
		{"RS256 without kid, only key", f.rsaOnly, signTest(t, jwt.SigningMethodRS256, f.keys.rsa, "", goodClaims(nil)), []string{ScopeCreate, ScopeAttach}},
		{"kid=path and tenant claim", renamed, signTest(t, jwt.SigningMethodRS256, f.keys.rsa, "signer", goodClaims(func(m jwt.MapClaims) {
			m["org"] = m["tenant"]
			delete(m, "tenant")
		})), []string{ScopeCreate, ScopeAttach}},
		{"expired within leeway", nil, hs(goodClaims(func(m jwt.MapClaims) { m["exp"] = testNow.Add(-20 * time.Second).Unix() })), []string{ScopeCreate, ScopeAttach}},
		{"nbf within leeway", nil, hs(goodClaims(func(m jwt.MapClaims) { m["nbf"] = testNow.Add(20 * time.Second).Unix() })), []string{ScopeCreate, ScopeAttach}},
		{"iat within leeway", nil, hs(goodClaims(func(m jwt.MapClaims) { m["iat"] = testNow.Add(20 * time.Second).Unix() })), []string{ScopeCreate, ScopeAttach}},
		{"lifetime exactly the maximum", nil, hs(goodClaims(func(m jwt.MapClaims) {
			m["iat"] = testNow.Add(-time.Hour).Unix()
			m["exp"] = testNow.Add(23 * time.Hour).Unix()
		})), []string{ScopeCreate, ScopeAttach}},
		{"aud list holding ours", nil, hs(goodClaims(func(m jwt.MapClaims) { m["aud"] = []string{"other", testAudience} })), []string{ScopeCreate, ScopeAttach}},
		{"no scope", nil, hs(goodClaims(func(m jwt.MapClaims) { delete(m, "scope") })), nil},
		{"scope with extra spaces", nil, hs(goodClaims(func(m jwt.MapClaims) { m["scope"] = "  exec:write   exec:attach " })), []string{ScopeWrite, ScopeAttach}},
		{"tenant edge", nil, hs(goodClaims(func(m jwt.MapClaims) { m["tenant"] = "0" + strings.Repeat("a_-", 20) + "zz" })), []string{ScopeCreate, ScopeAttach}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := tt.auth
			if a == nil {
				a = f.all
			}
			c, err := a.Verify(tt.token)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if c.Subject != "alice" || !tenantPattern().MatchString(c.Tenant) || c.ExpiresAt.IsZero() || c.IssuedAt.IsZero() {
				t.Errorf("claims %+v", c)
			}
			if len(c.Scopes) != len(tt.scopes) {
				t.Errorf("scopes %v, want %v", c.Scopes, tt.scopes)
			}
			for _, s := range tt.scopes {
				if !c.Has(s) {
					t.Errorf("scopes %v lack %q", c.Scopes, s)
				}
			}
		})
	}
}

// TestVerifyRefusesMutations changes every character of valid tokens of each
// algorithm: none of the results may verify.
func TestVerifyRefusesMutations(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	tokens := map[string]string{
		"HS256": signTest(t, jwt.SigningMethodHS256, f.secret, "hs", goodClaims(nil)),
		"RS256": signTest(t, jwt.SigningMethodRS256, f.keys.rsa, "rsa", goodClaims(nil)),
		"ES256": signTest(t, jwt.SigningMethodES256, f.keys.ec, "ec", goodClaims(nil)),
		"EdDSA": signTest(t, jwt.SigningMethodEdDSA, f.keys.ed, "ed", goodClaims(nil)),
	}
	for alg, tok := range tokens {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			if _, err := f.all.Verify(tok); err != nil {
				t.Fatalf("unmutated token refused: %v", err)
			}
			for i := range len(tok) {
				for _, r := range []string{"A", "x", "-", "_", ".", "="} {
					m := tok[:i] + r + tok[i+1:]
					if m == tok {
						continue
					}
					if _, err := f.all.Verify(m); err == nil {
						t.Fatalf("accepted %s with %q at %d", alg, r, i)
					}
				}
				if _, err := f.all.Verify(tok[:i] + tok[i+1:]); err == nil {
					t.Fatalf("accepted %s without byte %d", alg, i)
				}
			}
		})
	}
}

func TestNewAuthenticatorRefuses(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	ks := f.keys
	write := func(name string, data []byte) string { return writeTestFile(t, f.dir, name, data) }
	pemOf := func(typ string, der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}) }
	ecDER, err := x509.MarshalPKCS8PrivateKey(ks.ec)
	if err != nil {
		t.Fatal(err)
	}
	smallRSA, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	short := write("short.key", []byte(strings.Repeat("s", 31)))
	shortNL := write("short-nl.key", []byte(strings.Repeat("s", 31)+"\n"))
	empty := write("empty.key", nil)
	ecPriv := write("ec-private.pem", pemOf("PRIVATE KEY", ecDER))
	rsaPriv := write("rsa-private.pem", pemOf("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(ks.rsa)))
	garbage := write("garbage.pem", []byte("this is not a key\n"))
	badDER := write("bad-der.pem", pemOf("PUBLIC KEY", []byte("nope")))
	twoBlocks := write("two.pem", append(publicPEM(t, &ks.rsa.PublicKey), publicPEM(t, &ks.ec.PublicKey)...))
	rsa1024 := write("rsa1024.pem", publicPEM(t, &smallRSA.PublicKey))
	ec384 := write("p384.pem", publicPEM(t, &p384.PublicKey))
	rsaAgain := write("other/rsa.pem", f.rsaPEM)
	missing := filepath.Join(f.dir, "missing.pem")
	groupReadable := writeSecretMode(t, f.dir, "group.key", 0o640)
	worldReadable := writeSecretMode(t, f.dir, "world.key", 0o604)
	groupWritable := writeSecretMode(t, f.dir, "group-w.key", 0o620)

	tests := []struct {
		name string
		cfg  Config
		want []string // every one must appear in the error
	}{
		{"no keys", Config{}, []string{"no verification key"}},
		{"short secret", Config{HS256SecretFile: short}, []string{short, "31 bytes"}},
		{"short secret with newline", Config{HS256SecretFile: shortNL}, []string{shortNL, "31 bytes"}},
		{"empty secret", Config{HS256SecretFile: empty}, []string{empty, "0 bytes"}},
		{"missing secret file", Config{HS256SecretFile: missing}, []string{missing}},
		{"leeway 2m", Config{HS256SecretFile: f.secretFile, Leeway: 2 * time.Minute}, []string{"leeway"}},
		{"negative leeway", Config{HS256SecretFile: f.secretFile, Leeway: -time.Second}, []string{"leeway"}},
		{"negative max lifetime", Config{HS256SecretFile: f.secretFile, MaxLifetime: -time.Hour}, []string{"max lifetime"}},
		{"tenant claim sub", Config{HS256SecretFile: f.secretFile, TenantClaim: "sub"}, []string{"registered claim"}},
		{"PKCS8 private key", Config{PublicKeyFiles: []string{ecPriv}}, []string{ecPriv, "PRIVATE KEY", "public key only"}},
		{"PKCS1 private key", Config{PublicKeyFiles: []string{rsaPriv}}, []string{rsaPriv, "RSA PRIVATE KEY"}},
		{"garbage", Config{PublicKeyFiles: []string{garbage}}, []string{garbage, "no PEM block"}},
		{"bad DER", Config{PublicKeyFiles: []string{badDER}}, []string{badDER}},
		{"two PEM blocks", Config{PublicKeyFiles: []string{twoBlocks}}, []string{twoBlocks, "more than one"}},
		{"RSA 1024", Config{PublicKeyFiles: []string{rsa1024}}, []string{rsa1024, "1024 bits"}},
		{"ECDSA P-384", Config{PublicKeyFiles: []string{ec384}}, []string{ec384, "P-384"}},
		{"missing public key", Config{PublicKeyFiles: []string{missing}}, []string{missing}},
		{"duplicate kid from base names", Config{PublicKeyFiles: []string{f.rsaFile, rsaAgain}}, []string{rsaAgain, `duplicate key id "rsa"`}},
		{"duplicate kid secret and key", Config{HS256SecretFile: "rsa=" + f.secretFile, PublicKeyFiles: []string{f.rsaFile}}, []string{f.rsaFile, "duplicate key id"}},
		{"empty kid", Config{PublicKeyFiles: []string{"=" + f.rsaFile}}, []string{f.rsaFile, "empty key id"}},
		{"public keys without audience", Config{PublicKeyFiles: []string{f.rsaFile}}, []string{"audience"}},
		{"public keys and secret without audience", Config{HS256SecretFile: f.secretFile, PublicKeyFiles: []string{f.rsaFile}}, []string{"audience"}},
		{"group-readable secret", Config{HS256SecretFile: groupReadable}, []string{groupReadable, "mode 0640", "group or others", "chmod 600"}},
		{"world-readable secret", Config{HS256SecretFile: worldReadable}, []string{worldReadable, "mode 0604"}},
		{"group-writable secret", Config{HS256SecretFile: groupWritable}, []string{groupWritable, "mode 0620"}},
		{"secret is a directory", Config{HS256SecretFile: f.dir}, []string{f.dir, "not a regular file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := New(tt.cfg)
			if err == nil {
				t.Fatalf("New accepted %+v: %+v", tt.cfg, a)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q, want it to name %q", err, w)
				}
			}
			if strings.Contains(err.Error(), string(f.secret)) {
				t.Errorf("error %q reveals the secret", err)
			}
		})
	}
}

func TestNewAuthenticatorAccepts(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	exact := writeTestFile(t, f.dir, "crlf.key", []byte(strings.Repeat("k", 32)+"\r\n"))
	// Without a line ending, a final "\r" belongs to the secret.
	withCR := writeTestFile(t, f.dir, "cr.key", []byte(strings.Repeat("k", 31)+"\r"))
	tests := []struct {
		name string
		cfg  Config
	}{
		{"32-byte secret with CRLF", Config{HS256SecretFile: exact}},
		{"32-byte secret ending in CR", Config{HS256SecretFile: withCR}},
		{"leeway 60s", Config{HS256SecretFile: f.secretFile, Leeway: time.Minute}},
		{"public keys only", Config{PublicKeyFiles: []string{f.rsaFile, f.ecFile, f.edFile}, Audience: testAudience}},
		{"secret without audience", Config{HS256SecretFile: f.secretFile}},
		{"renamed kids", Config{HS256SecretFile: "a=" + f.secretFile, PublicKeyFiles: []string{"b=" + f.rsaFile, "c=" + f.rsaFile}, Audience: testAudience}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := New(tt.cfg); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestMintVerifyRoundTrip(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	in := Claims{
		Subject:   "bob",
		Tenant:    "team-7",
		Scopes:    map[string]bool{ScopeWrite: true, ScopeCreate: true, ScopeAttach: false},
		IssuedAt:  testNow.Add(-time.Minute),
		ExpiresAt: testNow.Add(time.Hour),
	}
	tok, err := f.all.Mint(in)
	if err != nil {
		t.Fatal(err)
	}
	header, payload := decodeSegments(t, tok)
	if header["kid"] != "hs" || header["alg"] != "HS256" {
		t.Errorf("header %v, want kid hs and alg HS256", header)
	}
	if payload["scope"] != "exec:create exec:write" || payload["iss"] != testIssuer || payload["aud"] != testAudience {
		t.Errorf("payload %v", payload)
	}
	got, err := f.all.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	want := in
	want.Scopes = map[string]bool{ScopeWrite: true, ScopeCreate: true}
	assertClaims(t, got, want)
	if !got.Has(ScopeWrite) || got.Has(ScopeAttach) || (Claims{}).Has(ScopeCreate) {
		t.Errorf("Has is wrong for %v", got.Scopes)
	}

	// A zero IssuedAt is the authenticator's now.
	tok, err = f.all.Mint(Claims{Subject: "bob", Tenant: "t", ExpiresAt: testNow.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if got, err = f.all.Verify(tok); err != nil || !got.IssuedAt.Equal(testNow) || len(got.Scopes) != 0 {
		t.Errorf("Verify = %+v, %v; want IssuedAt %v and no scopes", got, err, testNow)
	}

	// MintHS256 needs no authenticator and sets no kid.
	tok, err = MintHS256(f.secret, in, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err = f.hsOnly.Verify(tok); err != nil {
		t.Fatal(err)
	}
	assertClaims(t, got, want)
	if _, err := f.all.Verify(tok); err == nil {
		t.Error("a token without kid verified with several keys configured")
	}
}

func decodeSegments(t *testing.T, tok string) (header, payload map[string]any) {
	t.Helper()
	parts := strings.Split(tok, ".")
	for i, dst := range []*map[string]any{&header, &payload} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, dst); err != nil {
			t.Fatal(err)
		}
	}
	return header, payload
}

func assertClaims(t *testing.T, got, want Claims) {
	t.Helper()
	if got.Subject != want.Subject || got.Tenant != want.Tenant ||
		!got.IssuedAt.Equal(want.IssuedAt) || !got.ExpiresAt.Equal(want.ExpiresAt) ||
		!maps.Equal(got.Scopes, want.Scopes) {
		t.Errorf("claims %+v, want %+v", got, want)
	}
	// Verified claims say until when the token is accepted: the default
	// leeway of 30s after exp.
	if !got.ValidUntil.Equal(want.ExpiresAt.Add(30 * time.Second)) {
		t.Errorf("valid until %v, want exp %v + 30s", got.ValidUntil, want.ExpiresAt)
	}
}

func TestMintRefuses(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	ok := Claims{Subject: "bob", Tenant: "acme", IssuedAt: testNow, ExpiresAt: testNow.Add(time.Hour)}
	edit := func(e func(*Claims)) Claims { c := ok; e(&c); return c }
	tests := []struct {
		name string
		mint func() (string, error)
		want string
	}{
		{"no secret configured", func() (string, error) { return f.rsaOnly.Mint(ok) }, "no HS256 secret"},
		{"empty subject", func() (string, error) { return f.all.Mint(edit(func(c *Claims) { c.Subject = "" })) }, "empty subject"},
		{"bad tenant", func() (string, error) { return f.all.Mint(edit(func(c *Claims) { c.Tenant = "../x" })) }, "tenant"},
		{"no expiry", func() (string, error) { return f.all.Mint(edit(func(c *Claims) { c.ExpiresAt = time.Time{} })) }, "ExpiresAt"},
		{"lifetime over the maximum", func() (string, error) {
			return f.all.Mint(edit(func(c *Claims) { c.ExpiresAt = c.IssuedAt.Add(25 * time.Hour) }))
		}, "lifetime"},
		{"scope with a space", func() (string, error) {
			return f.all.Mint(edit(func(c *Claims) { c.Scopes = map[string]bool{"a b": true} }))
		}, "invalid scope"},
		{"MintHS256 empty secret", func() (string, error) { return MintHS256(nil, ok, "", "", "") }, "0 bytes"},
		{"MintHS256 short secret", func() (string, error) { return MintHS256(make([]byte, 31), ok, "", "", "") }, "31 bytes"},
		{"MintHS256 registered tenant claim", func() (string, error) { return MintHS256(f.secret, ok, "", "", "exp") }, "registered claim"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tok, err := tt.mint()
			if err == nil {
				t.Fatalf("minted %q", tok)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to say %q", err, tt.want)
			}
		})
	}
}

// FuzzVerify: Verify never panics, every error wraps ErrUnauthorized, and
// nothing verifies but the tokens Mint produced with the configured secret.
func FuzzVerify(f *testing.F) {
	fx := newAuthFixture(f)
	minted := make(map[string]bool)
	for i, c := range []Claims{
		{Subject: "alice", Tenant: "acme", Scopes: map[string]bool{ScopeCreate: true}},
		{Subject: "bob", Tenant: "t-1", Scopes: map[string]bool{ScopeAttach: true, ScopeWrite: true}},
		{Subject: "carol", Tenant: "x"},
	} {
		c.IssuedAt = testNow.Add(-time.Duration(i+1) * time.Minute)
		c.ExpiresAt = testNow.Add(time.Hour)
		tok, err := fx.all.Mint(c)
		if err != nil {
			f.Fatal(err)
		}
		minted[tok] = true
		f.Add(tok)
		f.Add(withPart(tok, 2, setPaddingBit(strings.Split(tok, ".")[2])))
		f.Add(tok[:len(tok)-1])
	}
	good := goodClaims(nil)
	f.Add(signTest(f, jwt.SigningMethodHS256, fx.rsaPEM, "rsa", good))
	f.Add(signTest(f, jwt.SigningMethodHS256, []byte{}, "hs", good))
	f.Add(signTest(f, jwt.SigningMethodRS256, fx.keys.rsaOther, "rsa", good))
	f.Add(b64JSON(f, map[string]any{"alg": "none"}) + "." + b64JSON(f, good) + ".")
	f.Add("")
	f.Add("..")
	f.Fuzz(func(t *testing.T, token string) {
		c, err := fx.all.Verify(token)
		if err != nil {
			if !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("error %v does not wrap ErrUnauthorized", err)
			}
			return
		}
		if !minted[token] {
			t.Fatalf("accepted a token Mint did not produce: %q", token)
		}
		if c.Subject == "" || !tenantPattern().MatchString(c.Tenant) {
			t.Fatalf("accepted claims %+v", c)
		}
	})
}
