//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
)

// startProfile asks serve's pprof for a CPU profile of o.profileFor,
// from now, and writes it to o.cpuProfile; the channel says how that
// went once it is done. Without -cpuprofile it is done at once.
func startProfile(ctx context.Context, srv *server, o options) <-chan error {
	done := make(chan error, 1)
	if o.cpuProfile == "" {
		done <- nil
		return done
	}
	go func() { done <- fetchProfile(ctx, srv.metrics, o) }() // ends with the profile or ctx
	return done
}

func fetchProfile(ctx context.Context, addr string, o options) error {
	if addr == "" {
		return fmt.Errorf("cpu profile: serve logged no metrics address")
	}
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(o.profileFor.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("cpu profile: %s", resp.Status)
	}
	f, err := os.Create(o.cpuProfile)
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cpu profile: write %s: %w", o.cpuProfile, err)
	}
	return nil
}
