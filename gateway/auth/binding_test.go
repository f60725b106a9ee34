package auth

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

func TestParseBindings(t *testing.T) {
	t.Parallel()
	b, err := ParseTenantBinding("https://idp.example/jwks?x=1=acme|beta")
	if err != nil || b.Source != "https://idp.example/jwks?x=1" || !slices.Equal(b.Tenants, []string{"acme", "beta"}) {
		t.Errorf("ParseTenantBinding = %+v, %v", b, err)
	}
	for _, bad := range []string{"", "acme", "=acme", "idp=", "idp=Acme", "idp=a||b", "idp=../x"} {
		if _, err := ParseTenantBinding(bad); err == nil {
			t.Errorf("ParseTenantBinding(%q) accepted", bad)
		}
	}
	is, err := ParseIssuer("https://idp-a.example=https://idp-a.example/jwks|kid-a")
	if err != nil || is.Name != "https://idp-a.example" || !slices.Equal(is.Sources, []string{"https://idp-a.example/jwks", "kid-a"}) {
		t.Errorf("ParseIssuer = %+v, %v", is, err)
	}
	if is, err := ParseIssuer("plain"); err != nil || is.Name != "plain" || is.Sources != nil {
		t.Errorf("ParseIssuer(plain) = %+v, %v", is, err)
	}
	for _, bad := range []string{"", "=kid", "iss=a||b", "iss=|"} {
		if _, err := ParseIssuer(bad); err == nil {
			t.Errorf("ParseIssuer(%q) accepted", bad)
		}
	}
}

// TestBindings: two providers, each its own issuer and keys: a key file
// "rsa" for idp-a and a JWKS for idp-b; each bound to its tenants.
func TestBindings(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	ks := f.keys
	srv := newJWKSServer(t)
	srv.set(t, map[string]any{"b1": &ks.ec.PublicKey})
	a, logs := newJWKSAuth(t, Config{
		PublicKeyFiles: []string{f.rsaFile, f.edFile},
		JWKSURLs:       []string{srv.URL},
		Issuers:        []Issuer{{Name: "idp-a", Sources: []string{"rsa"}}, {Name: "idp-b", Sources: []string{srv.URL}}, {Name: "idp-c"}},
		TenantBindings: []TenantBinding{
			{Source: "rsa", Tenants: []string{"acme", "beta"}},
			{Source: srv.URL, Tenants: []string{"gamma"}},
			{Source: "idp-c", Tenants: []string{"delta"}},
		},
	})
	waitReady(t, a, logs)
	claims := func(iss, tenant string) jwt.MapClaims {
		return goodClaims(func(m jwt.MapClaims) { m["iss"], m["tenant"] = iss, tenant })
	}
	rsaTok := func(iss, tenant string) string {
		return signTest(t, jwt.SigningMethodRS256, ks.rsa, "rsa", claims(iss, tenant))
	}
	jwksTok := func(iss, tenant string) string {
		return signTest(t, jwt.SigningMethodES256, ks.ec, "b1", claims(iss, tenant))
	}
	edTok := func(iss, tenant string) string {
		return signTest(t, jwt.SigningMethodEdDSA, ks.ed, "ed", claims(iss, tenant))
	}
	tests := []struct {
		name    string
		tok     string
		want    string // "" accepted
		tenancy bool   // refused for its tenant: ErrTenantNotBound
	}{
		{"idp-a key, bound tenant", rsaTok("idp-a", "acme"), "", false},
		{"idp-a key, other bound tenant", rsaTok("idp-a", "beta"), "", false},
		{"idp-a key, unbound tenant", rsaTok("idp-a", "gamma"), `tenant "gamma", key "rsa"`, true},
		{"idp-b JWKS, bound tenant", jwksTok("idp-b", "gamma"), "", false},
		{"idp-b JWKS, unbound tenant", jwksTok("idp-b", "acme"), `tenant "acme", key "` + srv.URL, true},
		{"idp-a key claiming idp-b", rsaTok("idp-b", "gamma"), `key "rsa" may not sign for issuer "idp-b"`, false},
		{"idp-b key claiming idp-a", jwksTok("idp-a", "acme"), "unknown kid", false},
		{"unknown issuer", rsaTok("idp-z", "acme"), "invalid issuer", false},
		{"no issuer", rsaTok("", "acme"), "iss claim is required", false},
		{"idp-c any key, bound tenant", edTok("idp-c", "delta"), "", false},
		{"idp-c any key, unbound tenant", edTok("idp-c", "acme"), `tenant "acme", issuer "idp-c"`, true},
		{"idp-c with a bound key's tenant", rsaTok("idp-c", "acme"), `tenant "acme", issuer "idp-c"`, true},
	}
	for _, tt := range tests {
		_, err := a.Verify(tt.tok)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want == "":
		case !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), tt.want):
			t.Errorf("%s: %v, want refused saying %q", tt.name, err, tt.want)
		case errors.Is(err, ErrTenantNotBound) != tt.tenancy:
			t.Errorf("%s: %v: ErrTenantNotBound %v, want %v", tt.name, err, !tt.tenancy, tt.tenancy)
		}
	}
}

func TestBindingsRefuseWhatIsNotConfigured(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	base := Config{PublicKeyFiles: []string{f.rsaFile}, Audience: testAudience, Issuer: "idp-a"}
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"binding names nothing", func(c *Config) { c.TenantBindings = []TenantBinding{{"rsa2", []string{"acme"}}} }, `"rsa2": neither`},
		{"binding names an issuer and a kid", func(c *Config) {
			c.Issuers = []Issuer{{Name: "rsa"}}
			c.TenantBindings = []TenantBinding{{"rsa", []string{"acme"}}}
		}, "both an issuer and a key source"},
		{"binding without tenants", func(c *Config) { c.TenantBindings = []TenantBinding{{"rsa", nil}} }, "no tenants"},
		{"binding with a bad tenant", func(c *Config) { c.TenantBindings = []TenantBinding{{"rsa", []string{"A"}}} }, `tenant "A"`},
		{"binding twice", func(c *Config) {
			c.TenantBindings = []TenantBinding{{"rsa", []string{"a"}}, {"rsa", []string{"b"}}}
		}, "given twice"},
		{"issuer with an unknown source", func(c *Config) { c.Issuers = []Issuer{{Name: "idp-b", Sources: []string{"nope"}}} }, `key source "nope"`},
		{"issuer twice", func(c *Config) { c.Issuers = []Issuer{{Name: "idp-a"}} }, "given twice"},
	}
	for _, tt := range tests {
		cfg := base
		tt.edit(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error saying %q", tt.name, err, tt.want)
		}
	}
}
