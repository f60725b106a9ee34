package gatewaytest

import (
	"bytes"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// ProxyConfig says where a CuttingProxy cuts.
type ProxyConfig struct {
	// Each connection is cut after MinBudget plus a random number below
	// Spread of server-to-client bytes.
	MinBudget, Spread int64
	// MaxCuts, when not zero, lets connections through whole after that
	// many cuts: a message larger than every budget must get through.
	MaxCuts int
	// Seed makes the budgets repeatable.
	Seed uint64
	// Path, when set, limits cutting (and Refuse) to connections whose
	// first request names it, such as "/v1/connect": a page's scripts
	// must load whole.
	Path string
}

// CuttingProxy forwards 127.0.0.1 connections to a target, or each to one
// of several picked at random (NewRotatingProxy), and cuts each after a
// random number of bytes from the server. It stops when the test ends.
type CuttingProxy struct {
	ln      net.Listener
	targets []string
	cfg     ProxyConfig

	mu       sync.Mutex
	rng      *rand.Rand
	cuts     int
	refusing bool
	served   map[string]int // connections sent to each target
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

// NewCuttingProxy starts a proxy to target (host:port).
func NewCuttingProxy(t testing.TB, target string, cfg ProxyConfig) *CuttingProxy {
	t.Helper()
	return NewRotatingProxy(t, []string{target}, cfg)
}

// NewRotatingProxy starts a proxy that sends each connection to one of
// targets (host:port each; at least one) picked at random: a client behind
// it that is cut reconnects, landing on another node of a cluster.
func NewRotatingProxy(t testing.TB, targets []string, cfg ProxyConfig) *CuttingProxy {
	t.Helper()
	if len(targets) == 0 {
		t.Fatal("proxy: no targets")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &CuttingProxy{ln: ln, targets: append([]string(nil), targets...), cfg: cfg,
		rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed+1)), served: map[string]int{}, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.Close() // a browser may still hold its connection
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// Addr returns the proxy's host:port.
func (p *CuttingProxy) Addr() string { return p.ln.Addr().String() }

// Cuts returns how many connections were cut so far.
func (p *CuttingProxy) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// Served returns how many connections went to each target so far.
func (p *CuttingProxy) Served() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.served)
}

// Refuse, while on, cuts every open connection and closes new ones (those
// on Path, when set) at once: the server looks gone.
func (p *CuttingProxy) Refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = on
	if on {
		for c := range p.conns {
			c.Close()
		}
	}
}

func (p *CuttingProxy) accept() {
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
func (p *CuttingProxy) forward(c net.Conn, target string, budget int64) {
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
	cut := true
	if p.cfg.Path != "" {
		head := make([]byte, 64)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _ := io.ReadAtLeast(c, head, 20)
		c.SetReadDeadline(time.Time{})
		if !bytes.Contains(head[:n], []byte(p.cfg.Path)) {
			cut, budget = false, 1<<40
		}
		up.Write(head[:n])
	}
	if cut && p.refused() {
		return
	}
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

func (p *CuttingProxy) refused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refusing
}
