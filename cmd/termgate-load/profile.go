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
// went once it is done. Without -cpuprofile, or when -profile names
// another phase than phase, it is done at once.
func startProfile(ctx context.Context, srv *server, o options, phase string) <-chan error {
	done := make(chan error, 1)
	if o.cpuProfile == "" || o.profilePhase != phase {
		done <- nil
		return done
	}
	go func() { done <- fetchProfile(ctx, srv.metrics, o) }() // ends with the profile or ctx
	return done
}

func fetchProfile(ctx context.Context, addr string, o options) error {
	query := fmt.Sprintf("profile?seconds=%d", int(o.profileFor.Seconds()))
	return fetchPprof(ctx, addr, query, o.cpuProfile, "cpu profile")
}

// writeHeapProfile writes serve's heap profile, taken after a collection,
// and its goroutines (FILE.goroutines), to o.heapProfile; without
// -heapprofile it does nothing.
func writeHeapProfile(ctx context.Context, srv *server, o options) error {
	if o.heapProfile == "" {
		return nil
	}
	if err := fetchPprof(ctx, srv.metrics, "heap?gc=1", o.heapProfile, "heap profile"); err != nil {
		return err
	}
	return fetchPprof(ctx, srv.metrics, "goroutine?debug=1", o.heapProfile+".goroutines", "goroutine profile")
}

// writeSettledHeapProfile writes serve's heap profile once every shell
// ended and -settle passed (FILE.settled): what finished executions and
// the server itself still hold. Without -heapprofile it does nothing.
func writeSettledHeapProfile(ctx context.Context, srv *server, o options) error {
	if o.heapProfile == "" {
		return nil
	}
	return fetchPprof(ctx, srv.metrics, "heap?gc=1", o.heapProfile+".settled", "heap profile")
}

// fetchPprof writes what serve's /debug/pprof/query answers to file.
func fetchPprof(ctx context.Context, addr, query, file, what string) error {
	if addr == "" {
		return fmt.Errorf("%s: serve logged no metrics address", what)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/"+query, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", what, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: write %s: %w", what, file, err)
	}
	return nil
}
