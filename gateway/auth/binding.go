package auth

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/golang-jwt/jwt/v5"
)

// Issuer is an accepted token issuer ("iss") and the key sources that
// sign for it: kids of key files or JWKS URLs. No sources: any key.
type Issuer struct {
	Name    string
	Sources []string
}

// TenantBinding limits the tenants a key source (a key file's kid or a
// JWKS URL) or an issuer may name in its tokens.
type TenantBinding struct {
	Source  string
	Tenants []string
}

// ParseIssuer parses "ISSUER" or "ISSUER=SOURCE|SOURCE...", the form of
// termgate serve --jwt-issuer. An issuer cannot hold "=".
func ParseIssuer(s string) (Issuer, error) {
	name, sources, _ := strings.Cut(s, "=")
	if name == "" {
		return Issuer{}, fmt.Errorf("auth: issuer %q: empty issuer", s)
	}
	is := Issuer{Name: name}
	if sources != "" {
		is.Sources = strings.Split(sources, "|")
	}
	if slices.Contains(is.Sources, "") {
		return Issuer{}, fmt.Errorf("auth: issuer %q: empty key source", s)
	}
	return is, nil
}

// ParseTenantBinding parses "SOURCE=TENANT|TENANT...", the form of
// termgate serve --jwt-tenant-binding. It splits at the last "=", which
// no tenant holds, so a JWKS URL with a query string is a source.
func ParseTenantBinding(s string) (TenantBinding, error) {
	i := strings.LastIndexByte(s, '=')
	if i <= 0 || i == len(s)-1 {
		return TenantBinding{}, fmt.Errorf("auth: tenant binding %q: want SOURCE=TENANT or SOURCE=TENANT|TENANT", s)
	}
	b := TenantBinding{Source: s[:i], Tenants: strings.Split(s[i+1:], "|")}
	for _, t := range b.Tenants {
		if !tenantPattern().MatchString(t) {
			return TenantBinding{}, fmt.Errorf("auth: tenant binding %q: tenant %q does not match %s", s, t, tenantPattern())
		}
	}
	return b, nil
}

// bindings are the issuer and tenant rules, checked after the signature.
type bindings struct {
	issuers         map[string][]string // accepted issuer: its sources (nil: any); empty map: iss not checked
	tenantsBySource map[string][]string
	tenantsByIssuer map[string][]string
}

// newBindings checks the rules against what is configured: each source an
// issuer or binding names must be a kid or JWKS URL, a binding's name
// exactly one of an issuer and a source.
func newBindings(cfg Config, sources map[string]bool) (bindings, error) {
	b := bindings{issuers: make(map[string][]string), tenantsBySource: make(map[string][]string), tenantsByIssuer: make(map[string][]string)}
	if cfg.Issuer != "" {
		b.issuers[cfg.Issuer] = nil
	}
	for _, is := range cfg.Issuers {
		if is.Name == "" {
			return b, errors.New("auth: auth config: empty issuer")
		}
		if _, dup := b.issuers[is.Name]; dup {
			return b, fmt.Errorf("auth: auth config: issuer %q given twice", is.Name)
		}
		for _, s := range is.Sources {
			if !sources[s] {
				return b, fmt.Errorf("auth: auth config: issuer %q: key source %q is neither a key file's kid nor a JWKS URL", is.Name, s)
			}
		}
		b.issuers[is.Name] = is.Sources
	}
	for _, tb := range cfg.TenantBindings {
		_, isIssuer := b.issuers[tb.Source]
		var into map[string][]string
		switch {
		case isIssuer && sources[tb.Source]:
			return b, fmt.Errorf("auth: auth config: tenant binding %q: names both an issuer and a key source", tb.Source)
		case isIssuer:
			into = b.tenantsByIssuer
		case sources[tb.Source]:
			into = b.tenantsBySource
		default:
			return b, fmt.Errorf("auth: auth config: tenant binding %q: neither an issuer nor a key file's kid nor a JWKS URL", tb.Source)
		}
		if len(tb.Tenants) == 0 {
			return b, fmt.Errorf("auth: auth config: tenant binding %q: no tenants", tb.Source)
		}
		for _, t := range tb.Tenants {
			if !tenantPattern().MatchString(t) {
				return b, fmt.Errorf("auth: auth config: tenant binding %q: tenant %q does not match %s", tb.Source, t, tenantPattern())
			}
		}
		if _, dup := into[tb.Source]; dup {
			return b, fmt.Errorf("auth: auth config: tenant binding %q given twice", tb.Source)
		}
		into[tb.Source] = tb.Tenants
	}
	return b, nil
}

// check refuses an issuer not accepted, a key that may not sign for its
// issuer, and a tenant not bound to the key's source or the issuer.
func (b bindings) check(iss, source, tenant string) error {
	if len(b.issuers) > 0 {
		sources, ok := b.issuers[iss]
		switch {
		case iss == "":
			return unauthorized("iss claim is required")
		case !ok:
			return fmt.Errorf("%w: %w", ErrUnauthorized, jwt.ErrTokenInvalidIssuer)
		}
		if sources != nil && !slices.Contains(sources, source) {
			return unauthorized("key %q may not sign for issuer %q", source, iss)
		}
	}
	if ts, ok := b.tenantsBySource[source]; ok && !slices.Contains(ts, tenant) {
		return fmt.Errorf("%w: tenant %q, key %q", ErrTenantNotBound, tenant, source)
	}
	if ts, ok := b.tenantsByIssuer[iss]; ok && !slices.Contains(ts, tenant) {
		return fmt.Errorf("%w: tenant %q, issuer %q", ErrTenantNotBound, tenant, iss)
	}
	return nil
}

// mayAsk reports whether the JWKS at source may hold the key of a token
// claiming iss: not when iss is bound to other sources.
func (b bindings) mayAsk(iss, source string) bool {
	sources, ok := b.issuers[iss]
	return !ok || sources == nil || slices.Contains(sources, source)
}
