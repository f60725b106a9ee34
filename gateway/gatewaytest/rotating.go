package gatewaytest

import (
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
)

// RotatingProxy forwards 127.0.0.1 connections each to a target picked
// at random, and cuts each after a random number of bytes from the
// server, as a CuttingProxy does: a client behind it reconnects over and
// over, landing on another node of a cluster each time. It stops when the
// test ends. ProxyConfig.Path is not used: every connection is cut.
type RotatingProxy struct {
	ln      net.Listener
	targets []string
	cfg     ProxyConfig

	mu     sync.Mutex
	rng    *rand.Rand
	cuts   int
	served map[string]int // connections sent to each target
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewRotatingProxy starts a proxy to targets (host:port each; at least
// one).
func NewRotatingProxy(t testing.TB, targets []string, cfg ProxyConfig) *RotatingProxy {
	t.Helper()
	if len(targets) == 0 {
		t.Fatal("rotating proxy: no targets")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &RotatingProxy{ln: ln, targets: append([]string(nil), targets...), cfg: cfg,
		rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed+1)), served: map[string]int{}, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// Addr returns the proxy's host:port.
func (p *RotatingProxy) Addr() string { return p.ln.Addr().String() }

// Cuts returns how many connections were cut so far.
func (p *RotatingProxy) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// Served returns how many connections went to each target so far.
func (p *RotatingProxy) Served() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.served))
	for k, v := range p.served {
		out[k] = v
	}
	return out
}

func (p *RotatingProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.targets[p.rng.IntN(len(p.targets))]
		budget := p.cfg.MinBudget + p.rng.Int64N(max(p.cfg.Spread, 1))
		if p.cfg.MaxCuts > 0 && p.cuts >= p.cfg.MaxCuts {
			budget = 1 << 40
		}
		p.served[target]++
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.forward(c, target, budget)
	}
}

// forward copies c to target and back, the way back for budget bytes.
func (p *RotatingProxy) forward(c net.Conn, target string, budget int64) {
	defer p.wg.Done()
	defer func() {
		c.Close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		io.Copy(up, c)
		up.Close() // the client left: so does the server side
	}()
	if n, _ := io.Copy(c, io.LimitReader(up, budget)); n == budget {
		p.mu.Lock()
		p.cuts++
		p.mu.Unlock()
	}
}
