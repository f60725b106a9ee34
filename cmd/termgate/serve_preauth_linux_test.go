package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// idleFlood holds connections that send nothing from several client
// addresses, and opens a new one for each that the server closes, so
// the connections before authentication stay as many as it can hold.
type idleFlood struct {
	target string
	wg     sync.WaitGroup
	opened chan struct{}
}

// hold keeps n idle connections from local until ctx ends; each redial
// after a close is bounded in count.
func (f *idleFlood) hold(ctx context.Context, local string, n int) {
	for range n {
		f.wg.Go(func() {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
			for range 200 {
				c, err := d.DialContext(ctx, "tcp", f.target)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					time.Sleep(20 * time.Millisecond)
					continue
				}
				select {
				case f.opened <- struct{}{}:
				default:
				}
				stop := context.AfterFunc(ctx, func() { c.Close() })
				c.Read(make([]byte, 1)) // until the server closes it, or ctx ends
				c.Close()
				stop()
				select {
				case <-ctx.Done():
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	}
}

// TestServeServesAnAuthenticatedClientWhileIdleConnectionsFillThePreAuthBudget:
// 4 client networks x 10 connections that send nothing, redialled as
// they are closed, fill what serve lets in before a request's headers
// (--max-conns 40 --max-conns-per-addr 10); a client that sends its
// token is served all the same, at once and again and again.
func TestServeServesAnAuthenticatedClientWhileIdleConnectionsFillThePreAuthBudget(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "--max-conns", "40", "--max-conns-per-addr", "10")
	tok := g.token(t, "acme", allScopes)
	ctx, cancel := context.WithCancel(t.Context())
	f := &idleFlood{target: strings.TrimPrefix(g.url, "http://"), opened: make(chan struct{}, 64)}
	t.Cleanup(func() { cancel(); f.wg.Wait() })
	for _, local := range []string{"127.1.0.1", "127.2.0.1", "127.3.0.1", "127.4.0.1"} {
		f.hold(ctx, local, 10)
	}
	for range 40 { // every idle connection has been accepted once
		select {
		case <-f.opened:
		case <-time.After(30 * time.Second):
			t.Fatal("the idle connections were not opened within 30s")
		}
	}
	time.Sleep(200 * time.Millisecond) // and the server took them all
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 10 {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", g.url+"/v1/executions", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d of an authenticated client, with the budget before authentication full: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}
}
