package netpolicy

import (
	"container/list"
	"net/netip"
	"sync"
)

// FakePrefix is where FakeDNS takes its synthetic addresses:
// 198.18.0.0/15, set aside for benchmarking (RFC 2544) and refused to
// every policy as a real address (see the package doc), so a synthetic
// address is never also a real destination. Inside a sandbox every
// address of it is synthetic: a policy that opens part of it cannot
// reach that part through a redirect.
var FakePrefix = netip.MustParsePrefix("198.18.0.0/15")

// DefaultMaxNames is how many names a FakeDNS holds an address for at
// once, unless told otherwise.
const DefaultMaxNames = 4096

// fakePool maps the names FakeDNS answered to synthetic addresses and
// back, holding at most max names: past it, the name asked least
// recently loses its address. Addresses are handed out in turn through
// the whole prefix (130,048 usable), so an address that lost its name is
// given to another only after every other address was handed out: a
// program that kept it meanwhile reaches no one rather than the wrong
// name.
type fakePool struct {
	mu     sync.Mutex
	prefix netip.Prefix
	max    int
	next   netip.Addr
	byName map[string]*list.Element // of *fakeEntry
	byAddr map[netip.Addr]*list.Element
	lru    list.List // front: asked most recently
}

type fakeEntry struct {
	name string
	addr netip.Addr
}

func newFakePool(prefix netip.Prefix, max int) *fakePool {
	return &fakePool{prefix: prefix.Masked(), max: max, next: prefix.Masked().Addr(),
		byName: map[string]*list.Element{}, byAddr: map[netip.Addr]*list.Element{}}
}

// addr returns name's address, giving it one if it has none.
func (p *fakePool) addr(name string) netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.byName[name]; ok {
		p.lru.MoveToFront(e)
		return e.Value.(*fakeEntry).addr
	}
	for p.lru.Len() >= p.max {
		p.drop(p.lru.Back())
	}
	a := p.take()
	e := p.lru.PushFront(&fakeEntry{name, a})
	p.byName[name], p.byAddr[a] = e, e
	return a
}

// take returns the next address no name holds, skipping the .0 and .255
// of every /24, which some programs take for a network or a broadcast.
func (p *fakePool) take() netip.Addr {
	for {
		a := p.next
		p.next = a.Next()
		if !p.prefix.Contains(p.next) {
			p.next = p.prefix.Addr()
		}
		last := a.As4()[3]
		if _, held := p.byAddr[a]; !held && last != 0 && last != 255 {
			return a
		}
	}
}

func (p *fakePool) drop(e *list.Element) {
	f := e.Value.(*fakeEntry)
	delete(p.byName, f.name)
	delete(p.byAddr, f.addr)
	p.lru.Remove(e)
}

// name returns the name a holds: fake is whether a is of the pool's
// prefix at all, and name is "" when no name holds it (any longer).
func (p *fakePool) name(a netip.Addr) (name string, fake bool) {
	a = a.Unmap()
	if !p.prefix.Contains(a) {
		return "", false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.byAddr[a]; ok {
		return e.Value.(*fakeEntry).name, true
	}
	return "", true
}
