package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/termgate/termgate/gateway/auth"
)

// authConfig is the authenticator's configuration from the jwt flags.
// The first issuer, when it names no key sources, is also the one dev
// mode's token carries.
func (o *serveOptions) authConfig(log *slog.Logger) (auth.Config, error) {
	cfg := auth.Config{
		HS256SecretFile: o.secretFile, PublicKeyFiles: o.publicKeys, JWKSURLs: o.jwksURLs,
		JWKS:     auth.JWKSConfig{RefreshInterval: o.jwksRefresh},
		Audience: o.audience, TenantClaim: o.tenantClaim, Leeway: o.leeway, Logger: log,
	}
	for _, spec := range o.issuers {
		is, err := auth.ParseIssuer(spec)
		if err != nil {
			return cfg, usageError{fmt.Errorf("serve: --jwt-issuer: %w", err)}
		}
		cfg.Issuers = append(cfg.Issuers, is)
	}
	if len(cfg.Issuers) > 0 && len(cfg.Issuers[0].Sources) == 0 {
		cfg.Issuer, cfg.Issuers = cfg.Issuers[0].Name, cfg.Issuers[1:]
	}
	for _, spec := range o.bindings {
		b, err := auth.ParseTenantBinding(spec)
		if err != nil {
			return cfg, usageError{fmt.Errorf("serve: --jwt-tenant-binding: %w", err)}
		}
		cfg.TenantBindings = append(cfg.TenantBindings, b)
	}
	return cfg, nil
}

// checkAuthFlags refuses a JWKS URL that is neither https nor loopback
// and a --jwt-issuer or --jwt-tenant-binding that does not parse, before
// anything starts; what they name is checked by auth.New.
func (o *serveOptions) checkAuthFlags() error {
	for _, u := range o.jwksURLs {
		if err := auth.CheckJWKSURL(u); err != nil {
			return fmt.Errorf("serve: --jwt-jwks-url: %w", err)
		}
	}
	_, err := o.authConfig(nil)
	return err
}

// reloadOnHangup re-reads the key files on each SIGHUP from hups until ctx
// ends or the returned stop is called (which waits for it). A file that
// is bad keeps the keys in use; either way the outcome is logged.
func (g *gatewayParts) reloadOnHangup(ctx context.Context, hups <-chan os.Signal, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hups:
				reloadPolicies(g.egress, log)
				kids, err := g.authn.Reload()
				if err != nil {
					log.Error("keys not reloaded: the keys in use stay", "err", err)
					continue
				}
				log.Info("keys reloaded", "kids", kids)
			}
		}
	}()
	return func() { cancel(); <-done }
}
