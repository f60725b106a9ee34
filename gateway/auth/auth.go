// Package auth verifies the bearer tokens termgate accepts (JWTs signed
// with an HS256 secret or an RS256, ES256 or EdDSA public key, from files
// or from an identity provider's JWKS) and mints HS256 ones. A verified
// token yields Claims: the subject, its tenant, and the scopes that the
// gateway checks per request.
//
// Keys from files are re-read by Reload (serve: on SIGHUP); JWKS keys are
// fetched and refreshed in the background until Close. A key source (a
// file's kid, a JWKS URL) or an issuer can be bound to the tenants it may
// name, and each accepted issuer to the key sources that sign for it.
//
// It imports nothing of the server, so "termgate token" mints on every
// operating system; the gateway verifies every connection and HTTP API
// request through an Authenticator.
package auth

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/termgate/termgate/gateway/wire"
)

// Config configures token verification. Zero values mean defaults.
type Config struct {
	// HS256SecretFile holds an HS256 secret of at least 32 bytes; one
	// trailing newline is trimmed. Optional. The file must be a regular
	// file that neither group nor others may read or write (0600 or
	// 0400), owned by the effective user or root. Its key id is the file's base
	// name without extension, unless given as "kid=path".
	HS256SecretFile string
	// PublicKeyFiles are PEM "PUBLIC KEY" files: RSA of at least 2048 bits
	// (RS256), ECDSA P-256 (ES256) or Ed25519 (EdDSA). The key id of each is
	// the file's base name without extension, unless given as "kid=path".
	PublicKeyFiles []string
	// JWKSURLs are identity providers' JWK Sets, fetched and refreshed
	// (see JWKS): https, or http to a loopback address (127.0.0.0/8, ::1).
	// Their keys are chosen by the token's kid.
	JWKSURLs []string
	// JWKS bounds and paces the JWKS fetches.
	JWKS JWKSConfig
	// Issuer, when set, is an accepted "iss" and the one Mint writes.
	Issuer string
	// Issuers are further accepted issuers, each limited to the key
	// sources it names. With Issuer and Issuers both empty, "iss" is not
	// checked; otherwise it must be one of them.
	Issuers []Issuer
	// TenantBindings limit the tenants a key source or an issuer may
	// name. A source or issuer without a binding may name any tenant.
	TenantBindings []TenantBinding
	// Audience, when set, must be in the token's "aud". It is required
	// with PublicKeyFiles and JWKSURLs: an identity provider signs tokens
	// for many services, and only the audience tells ours apart.
	Audience string
	// TenantClaim names the claim holding the tenant (default "tenant").
	TenantClaim string
	// Leeway is the clock skew allowed on exp, nbf and iat: at most 60s
	// (default 30s).
	Leeway time.Duration
	// MaxLifetime bounds exp - iat (default 24h).
	MaxLifetime time.Duration
	// Now is the clock, for tests; nil means time.Now.
	Now func() time.Time
	// Logger receives the JWKS fetches' outcomes; nil discards them.
	Logger *slog.Logger
}

// Claims is what a verified token grants.
type Claims struct {
	Subject string
	Tenant  string
	// Scopes come from the space-separated "scope" claim (RFC 8693 style).
	// A token without scopes can do nothing.
	Scopes    map[string]bool
	ExpiresAt time.Time
	IssuedAt  time.Time
	// ValidUntil is when Verify stops accepting the token: ExpiresAt plus
	// the leeway. A connection lasts until then.
	ValidUntil time.Time
}

// Has reports whether the token grants scope.
func (c Claims) Has(scope string) bool { return c.Scopes[scope] }

// Scope names.
const (
	ScopeCreate = "exec:create" // start an execution
	ScopeAttach = "exec:attach" // attach to an execution and read its output
	ScopeWrite  = "exec:write"  // send input, resize and signals
)

// ErrUnauthorized is wrapped by every verification failure. The text after
// it is for logs only, never for clients: it says which check failed.
var ErrUnauthorized = errors.New("auth: unauthorized")

// ErrTenantNotBound is wrapped by the refusal of a valid token whose
// tenant is not among those bound to its key source or its issuer. It
// wraps ErrUnauthorized.
var ErrTenantNotBound = fmt.Errorf("%w: tenant not bound to the token's key or issuer", ErrUnauthorized)

const (
	defaultTenantClaim = "tenant"
	defaultLeeway      = 30 * time.Second
	maxLeeway          = 60 * time.Second
	defaultMaxLifetime = 24 * time.Hour
	minSecretBytes     = 32
)

// tenantPattern keeps tenants safe to use as a directory name.
var tenantPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`) })

// registeredClaims cannot be used as the tenant claim: Mint writes them.
var registeredClaims = []string{"iss", "sub", "aud", "exp", "nbf", "iat", "jti", "scope"}

// Authenticator verifies bearer tokens against the configured keys. It is
// safe for concurrent use. Close it when JWKSURLs are set: it stops their
// refreshes.
type Authenticator struct {
	cfg      Config
	log      *slog.Logger
	keys     atomic.Pointer[keySet] // the files' keys; Reload swaps them whole
	reloadMu sync.Mutex             // one Reload at a time, stored in order
	jwks     []*jwksSource
	binds    bindings
	ctx      context.Context // ends at Close: JWKS fetches and refreshes
	stop     context.CancelFunc
	wg       sync.WaitGroup // the JWKS first-fetch loops
	client   *http.Client
}

// keySet is the keys read from files at one time, never changed after.
type keySet struct {
	keys      map[string]authKey // by kid
	onlyKID   string             // the key for tokens without kid; "" unless exactly one key and no JWKS
	secret    []byte             // HS256 secret for Mint; nil when none
	secretKID string
	parser    *jwt.Parser
}

// authKey is one configured key and the only algorithm it accepts, so that a
// token cannot choose how its signature is checked (algorithm confusion).
type authKey struct {
	method jwt.SigningMethod
	key    any // []byte, *rsa.PublicKey, *ecdsa.PublicKey or ed25519.PublicKey; never PEM
}

// New loads the configured keys and starts fetching the JWKS URLs in the
// background (Ready reports when some key source has keys; a JWKS that
// has not answered its first fetch within a few seconds is logged). It fails when
// there is no key source, a secret is shorter than 32 bytes, a file is
// unreadable or holds something other than a supported public key, two
// keys share a kid, a JWKS URL is neither https nor loopback, a binding
// names nothing configured, or a duration or bound is out of range.
func New(cfg Config) (*Authenticator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	a := &Authenticator{cfg: cfg, log: cfg.Logger}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if err := a.checkSources(); err != nil {
		return nil, err
	}
	ks, err := a.loadKeySet()
	if err != nil {
		return nil, err
	}
	a.keys.Store(ks)
	if (len(cfg.PublicKeyFiles) > 0 || len(cfg.JWKSURLs) > 0) && cfg.Audience == "" {
		return nil, errors.New("auth: auth config: public keys need an audience: without one, any token the identity provider signs for another service is accepted (termgate serve: --jwt-audience)")
	}
	if a.binds, err = newBindings(cfg, a.sourceNames()); err != nil {
		return nil, err
	}
	a.startJWKS()
	return a, nil
}

// checkSources refuses a configuration without keys and bad JWKS URLs.
func (a *Authenticator) checkSources() error {
	if a.cfg.HS256SecretFile == "" && len(a.cfg.PublicKeyFiles) == 0 && len(a.cfg.JWKSURLs) == 0 {
		return errors.New("auth: auth config: no verification key: set an HS256 secret file, public key files or JWKS URLs")
	}
	seen := make(map[string]bool)
	for _, u := range a.cfg.JWKSURLs {
		if err := CheckJWKSURL(u); err != nil {
			return err
		}
		if seen[u] {
			return fmt.Errorf("auth: JWKS URL %s given twice", u)
		}
		seen[u] = true
	}
	return nil
}

// sourceNames are the key sources bindings may name: the files' kids and
// the JWKS URLs.
func (a *Authenticator) sourceNames() map[string]bool {
	names := make(map[string]bool)
	for kid := range a.keys.Load().keys {
		names[kid] = true
	}
	for _, u := range a.cfg.JWKSURLs {
		names[u] = true
	}
	return names
}

// Reload reads the HS256 secret and public key files again and, when
// every one is good, replaces the keys in use and returns their kids.
// Otherwise it returns the error and the keys in use stay as they were:
// never a half-applied set. Verifications in flight finish with the keys
// they started with.
func (a *Authenticator) Reload() ([]string, error) {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	ks, err := a.loadKeySet()
	if err != nil {
		return nil, fmt.Errorf("auth: reload: %w", err)
	}
	a.keys.Store(ks)
	return ks.kids(), nil
}

// KeyIDs returns the kids of the keys read from files, sorted.
func (a *Authenticator) KeyIDs() []string { return a.keys.Load().kids() }

func (ks *keySet) kids() []string {
	kids := make([]string, 0, len(ks.keys))
	for kid := range ks.keys {
		kids = append(kids, kid)
	}
	slices.Sort(kids)
	return kids
}

// Ready returns nil once some key source has keys: a key file (the
// HS256 secret or a public key), or a JWKS fetched once. Otherwise it
// returns an error naming the JWKS not fetched yet. A JWKS that never
// answers keeps out only the tokens of its own keys, not the others'.
func (a *Authenticator) Ready() error {
	pending := a.PendingJWKS()
	if len(a.keys.Load().keys) > 0 || len(pending) < len(a.jwks) {
		return nil
	}
	return fmt.Errorf("auth: no key file, and no JWKS fetched yet: %s", strings.Join(pending, ", "))
}

// PendingJWKS returns the JWKS URLs not fetched once yet, whose tokens
// are refused until they are.
func (a *Authenticator) PendingJWKS() []string {
	var pending []string
	for _, s := range a.jwks {
		if s.keyfunc.Load() == nil {
			pending = append(pending, s.url)
		}
	}
	return pending
}

// Close stops the JWKS fetches and refreshes and waits for them. It is
// idempotent; Verify goes on with the keys held.
func (a *Authenticator) Close() error {
	a.stop()
	a.wg.Wait()
	a.client.CloseIdleConnections()
	return nil
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.TenantClaim == "" {
		cfg.TenantClaim = defaultTenantClaim
	}
	if slices.Contains(registeredClaims, cfg.TenantClaim) {
		return cfg, fmt.Errorf("auth: auth config: tenant claim %q is a registered claim", cfg.TenantClaim)
	}
	switch {
	case cfg.Leeway == 0:
		cfg.Leeway = defaultLeeway
	case cfg.Leeway < 0 || cfg.Leeway > maxLeeway:
		return cfg, fmt.Errorf("auth: auth config: leeway %v out of range (0, %v]", cfg.Leeway, maxLeeway)
	}
	switch {
	case cfg.MaxLifetime == 0:
		cfg.MaxLifetime = defaultMaxLifetime
	case cfg.MaxLifetime < 0:
		return cfg, fmt.Errorf("auth: auth config: negative max lifetime %v", cfg.MaxLifetime)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	jwks, err := cfg.JWKS.withDefaults()
	cfg.JWKS = jwks
	return cfg, err
}

// loadKeySet reads the secret and public key files.
func (a *Authenticator) loadKeySet() (*keySet, error) {
	ks := &keySet{keys: make(map[string]authKey)}
	if a.cfg.HS256SecretFile != "" {
		kid, path := splitKeySpec(a.cfg.HS256SecretFile)
		secret, err := readSecret(path)
		if err != nil {
			return nil, err
		}
		ks.secret, ks.secretKID = secret, kid
		if err := ks.add(kid, path, authKey{jwt.SigningMethodHS256, secret}); err != nil {
			return nil, err
		}
	}
	for _, spec := range a.cfg.PublicKeyFiles {
		kid, path := splitKeySpec(spec)
		k, err := readPublicKey(path)
		if err != nil {
			return nil, err
		}
		if err := ks.add(kid, path, k); err != nil {
			return nil, err
		}
	}
	if len(ks.keys) == 1 && len(a.cfg.JWKSURLs) == 0 {
		for kid := range ks.keys {
			ks.onlyKID = kid
		}
	}
	ks.parser = jwt.NewParser(a.parserOptions(ks)...)
	return ks, nil
}

func (ks *keySet) add(kid, path string, k authKey) error {
	if kid == "" {
		return fmt.Errorf("auth: key %s: empty key id", path)
	}
	if _, dup := ks.keys[kid]; dup {
		return fmt.Errorf("auth: key %s: duplicate key id %q", path, kid)
	}
	ks.keys[kid] = k
	return nil
}

// parserOptions allow the algorithms of ks's keys, and with JWKS those a
// JWKS key may have; the issuer is checked with the bindings.
func (a *Authenticator) parserOptions(ks *keySet) []jwt.ParserOption {
	var algs []string
	for _, k := range ks.keys {
		algs = append(algs, k.method.Alg())
	}
	if len(a.cfg.JWKSURLs) > 0 {
		algs = append(algs, publicAlgs...)
	}
	slices.Sort(algs)
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(slices.Compact(algs)),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(), // checks iat is not in the future; presence is checked in claims
		jwt.WithLeeway(a.cfg.Leeway),
		jwt.WithTimeFunc(a.cfg.Now),
		jwt.WithStrictDecoding(), // one encoding per token: no non-zero padding bits
	}
	if a.cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(a.cfg.Audience))
	}
	return opts
}

// publicAlgs are the algorithms of public keys, one per key type.
var publicAlgs = []string{jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg(), jwt.SigningMethodEdDSA.Alg()}

// splitKeySpec splits "kid=path"; a plain path gets its base name without
// extension as kid.
func splitKeySpec(spec string) (kid, path string) {
	if k, p, ok := strings.Cut(spec, "="); ok && !strings.ContainsAny(k, `/\`) {
		return k, p
	}
	base := filepath.Base(spec)
	return strings.TrimSuffix(base, filepath.Ext(base)), spec
}

// readSecret reads the HS256 secret after checking, as ssh does with a
// private key, that only this user can read or write it: a secret others
// can read lets them mint any token, and one another user owns or can
// write may have been chosen by them. Root may own it: root can read it
// anyway.
func readSecret(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth: read HS256 secret: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("auth: read HS256 secret: %w", err)
	}
	if err := checkSecretFile(path, fi); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("auth: read HS256 secret: %w", err)
	}
	if len(b) > maxSecretFileBytes {
		return nil, fmt.Errorf("auth: HS256 secret %s: larger than %d bytes", path, maxSecretFileBytes)
	}
	b = trimLineEnding(b)
	if len(b) < minSecretBytes {
		return nil, fmt.Errorf("auth: HS256 secret %s: %d bytes, need at least %d", path, len(b), minSecretBytes)
	}
	return b, nil
}

// maxSecretFileBytes bounds the secret file: a secret is a line, not a
// file of any size.
const maxSecretFileBytes = 64 << 10

// trimLineEnding drops one final "\n" or "\r\n", which editors and echo
// add, and nothing else: a secret's own trailing bytes are part of it.
func trimLineEnding(b []byte) []byte {
	if s, ok := bytes.CutSuffix(b, []byte("\n")); ok {
		return bytes.TrimSuffix(s, []byte("\r"))
	}
	return b
}

func readPublicKey(path string) (authKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return authKey{}, fmt.Errorf("auth: read public key: %w", err)
	}
	block, rest := pem.Decode(data)
	if block == nil {
		return authKey{}, fmt.Errorf("auth: public key %s: no PEM block", path)
	}
	if next, _ := pem.Decode(rest); next != nil {
		return authKey{}, fmt.Errorf("auth: public key %s: more than one PEM block", path)
	}
	if block.Type != "PUBLIC KEY" {
		hint := ""
		if strings.Contains(block.Type, "PRIVATE") {
			hint = "; give the public key only"
		}
		return authKey{}, fmt.Errorf("auth: public key %s: PEM block %q, want \"PUBLIC KEY\"%s", path, block.Type, hint)
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return authKey{}, fmt.Errorf("auth: public key %s: %w", path, err)
	}
	k, err := newPublicAuthKey(pub)
	if err != nil {
		return authKey{}, fmt.Errorf("auth: public key %s: %w", path, err)
	}
	return k, nil
}

func newPublicAuthKey(pub any) (authKey, error) {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < 2048 {
			return authKey{}, fmt.Errorf("RSA key of %d bits, need at least 2048", n)
		}
		return authKey{jwt.SigningMethodRS256, k}, nil
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return authKey{}, fmt.Errorf("ECDSA curve %s, want P-256", k.Curve.Params().Name)
		}
		return authKey{jwt.SigningMethodES256, k}, nil
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return authKey{}, fmt.Errorf("Ed25519 key of %d bytes, want %d", len(k), ed25519.PublicKeySize)
		}
		return authKey{jwt.SigningMethodEdDSA, k}, nil
	default:
		return authKey{}, fmt.Errorf("unsupported key type %T", pub)
	}
}

// Verify checks token's signature and claims and returns what it grants.
// Every error wraps ErrUnauthorized. A token with a kid that no file key
// and no fetched JWKS has may make a JWKS refresh first (rate-limited,
// JWKSConfig.UnknownKIDInterval), which Verify waits for, at most
// JWKSConfig.Timeout.
func (a *Authenticator) Verify(token string) (Claims, error) {
	if len(token) > wire.MaxTokenBytes {
		return Claims{}, unauthorized("token longer than %d bytes", wire.MaxTokenBytes)
	}
	ks := a.keys.Load()
	var source string // the key's: a file's kid or a JWKS URL
	t, err := ks.parser.ParseWithClaims(token, jwt.MapClaims{}, func(t *jwt.Token) (any, error) {
		k, src, err := a.keyFor(ks, t)
		source = src
		return k, err
	})
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	m := t.Claims.(jwt.MapClaims)
	c, err := a.claimsFrom(m)
	if err != nil {
		return Claims{}, err
	}
	iss, _ := m["iss"].(string)
	if err := a.binds.check(iss, source, c.Tenant); err != nil {
		return Claims{}, err
	}
	return c, nil
}

// keyFor picks the key by kid, from the files first, then the JWKS, and
// refuses a token whose algorithm is not the key's own. It returns the
// key's source too.
func (a *Authenticator) keyFor(ks *keySet, t *jwt.Token) (any, string, error) {
	if _, ok := t.Header["crit"]; ok {
		return nil, "", errors.New("crit header: no extensions are understood")
	}
	raw, ok := t.Header["kid"]
	if !ok {
		if ks.onlyKID == "" {
			return nil, "", errors.New("no kid and several keys (or a JWKS) configured")
		}
		raw = ks.onlyKID
	}
	kid, ok := raw.(string)
	if !ok {
		return nil, "", errors.New("kid is not a string")
	}
	if k, ok := ks.keys[kid]; ok {
		key, err := k.check(t)
		return key, kid, err
	}
	// The issuer is not verified yet: it only narrows which JWKS are
	// asked, and the bindings check it against the key's source after.
	iss, _ := t.Claims.(jwt.MapClaims)["iss"].(string)
	for _, s := range a.jwks {
		if !a.binds.mayAsk(iss, s.url) {
			continue
		}
		k, err := s.key(a.ctx, t)
		if errors.Is(err, errNoSuchKey) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		key, err := k.check(t)
		return key, s.url, err
	}
	return nil, "", errors.New("unknown kid")
}

// check returns k's key when t's algorithm is k's own.
func (k authKey) check(t *jwt.Token) (any, error) {
	if t.Method == nil || t.Method.Alg() != k.method.Alg() {
		return nil, errors.New("algorithm does not match the key")
	}
	return k.key, nil
}

// claimsFrom checks what the parser does not: iat present, lifetime, sub,
// tenant and scope.
func (a *Authenticator) claimsFrom(m jwt.MapClaims) (Claims, error) {
	exp, err := m.GetExpirationTime()
	if err != nil || exp == nil {
		return Claims{}, unauthorized("exp claim invalid")
	}
	iat, err := m.GetIssuedAt()
	if err != nil || iat == nil {
		return Claims{}, unauthorized("iat claim is required")
	}
	if life := exp.Sub(iat.Time); life <= 0 || life > a.cfg.MaxLifetime {
		return Claims{}, unauthorized("lifetime %v outside (0, %v]", life, a.cfg.MaxLifetime)
	}
	c := Claims{ExpiresAt: exp.Time, IssuedAt: iat.Time, ValidUntil: exp.Add(a.cfg.Leeway)}
	if c.Subject, _ = m["sub"].(string); c.Subject == "" {
		return Claims{}, unauthorized("sub claim missing, empty or not a string")
	}
	if c.Tenant, _ = m[a.cfg.TenantClaim].(string); !tenantPattern().MatchString(c.Tenant) {
		return Claims{}, unauthorized("tenant claim missing or invalid")
	}
	if raw, ok := m["scope"]; ok {
		s, ok := raw.(string)
		if !ok {
			return Claims{}, unauthorized("scope claim is not a string")
		}
		c.Scopes = parseScopes(s)
	}
	return c, nil
}

func parseScopes(s string) map[string]bool {
	scopes := make(map[string]bool)
	for _, sc := range strings.Fields(s) {
		scopes[sc] = true
	}
	return scopes
}

func unauthorized(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnauthorized, fmt.Sprintf(format, args...))
}

// Mint signs an HS256 token for c with the configured secret, for `termgate
// token`, dev mode and tests. A zero IssuedAt means now; ExpiresAt is
// required and the lifetime must fit MaxLifetime. The token carries the
// secret's kid. It fails when no HS256 secret is configured.
func (a *Authenticator) Mint(c Claims) (string, error) {
	ks := a.keys.Load()
	if ks.secret == nil {
		return "", errors.New("auth: mint: no HS256 secret configured")
	}
	if c.IssuedAt.IsZero() {
		c.IssuedAt = a.cfg.Now()
	}
	m, err := mintClaims(c, a.cfg.TenantClaim, a.cfg.MaxLifetime)
	if err != nil {
		return "", err
	}
	return signHS256(ks.secret, ks.secretKID, m, a.cfg.Issuer, a.cfg.Audience)
}

// MintHS256 is Mint with an explicit secret of at least 32 bytes and no kid.
// An empty tenantClaim means "tenant"; empty issuer and audience are left out.
func MintHS256(secret []byte, c Claims, issuer, audience, tenantClaim string) (string, error) {
	if len(secret) < minSecretBytes {
		return "", fmt.Errorf("auth: mint: secret of %d bytes, need at least %d", len(secret), minSecretBytes)
	}
	if tenantClaim == "" {
		tenantClaim = defaultTenantClaim
	}
	if slices.Contains(registeredClaims, tenantClaim) {
		return "", fmt.Errorf("auth: mint: tenant claim %q is a registered claim", tenantClaim)
	}
	if c.IssuedAt.IsZero() {
		c.IssuedAt = time.Now()
	}
	m, err := mintClaims(c, tenantClaim, 0)
	if err != nil {
		return "", err
	}
	return signHS256(secret, "", m, issuer, audience)
}

func signHS256(secret []byte, kid string, m jwt.MapClaims, issuer, audience string) (string, error) {
	if issuer != "" {
		m["iss"] = issuer
	}
	if audience != "" {
		m["aud"] = audience
	}
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, m)
	if kid != "" {
		t.Header["kid"] = kid
	}
	s, err := t.SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("auth: mint: sign: %w", err)
	}
	return s, nil
}

// mintClaims refuses what Verify would refuse, so a minted token verifies.
// A zero maxLifetime means no bound.
func mintClaims(c Claims, tenantClaim string, maxLifetime time.Duration) (jwt.MapClaims, error) {
	if c.Subject == "" {
		return nil, errors.New("auth: mint: empty subject")
	}
	if !tenantPattern().MatchString(c.Tenant) {
		return nil, fmt.Errorf("auth: mint: tenant %q does not match %s", c.Tenant, tenantPattern())
	}
	iat, exp := jwt.NewNumericDate(c.IssuedAt), jwt.NewNumericDate(c.ExpiresAt)
	life := exp.Sub(iat.Time)
	if life <= 0 {
		return nil, errors.New("auth: mint: ExpiresAt must be after IssuedAt")
	}
	if maxLifetime > 0 && life > maxLifetime {
		return nil, fmt.Errorf("auth: mint: lifetime %v exceeds %v", life, maxLifetime)
	}
	m := jwt.MapClaims{"sub": c.Subject, tenantClaim: c.Tenant, "iat": iat, "exp": exp}
	var scopes []string
	for sc, ok := range c.Scopes {
		if !ok {
			continue
		}
		if !validScopeToken(sc) {
			return nil, fmt.Errorf("auth: mint: invalid scope %q", sc)
		}
		scopes = append(scopes, sc)
	}
	if len(scopes) > 0 {
		slices.Sort(scopes)
		m["scope"] = strings.Join(scopes, " ")
	}
	return m, nil
}

// validScopeToken reports whether s is a scope-token (RFC 6749 section 3.3).
func validScopeToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < 0x21 || r > 0x7e || r == '"' || r == '\\' {
			return false
		}
	}
	return true
}
