//go:build linux

package sandbox

import "sync"

// exitNotice holds the callbacks OnExit registered until the exit is
// final. Its zero value is ready.
type exitNotice struct {
	mu    sync.Mutex
	fs    []func(Exit)
	final bool // announce ran: OnExit calls at once
}

// OnExit arranges for f to be called once with the exit Wait returns, as
// soon as Wait would return: the process tree is gone and every output
// stream was delivered. A caller that needs the exit then needs no
// goroutine blocked in Wait, so an idle process costs one goroutine less.
//
// f runs on the goroutine that finalised the exit, or, when the exit is
// already final, on the caller's before OnExit returns: it must not take
// a lock its caller holds. Until f returns, Release may be called (from f
// too), and a launcher's Detach does not wait for it.
func (p *Process) OnExit(f func(Exit)) {
	n := &p.notice
	n.mu.Lock()
	if !n.final {
		n.fs = append(n.fs, f)
		n.mu.Unlock()
		return
	}
	n.mu.Unlock()
	f(p.exit)
}

// announce makes the exit final: Wait returns, then every OnExit
// callback is called. Called once, by the goroutine that set p.exit.
func (p *Process) announce() {
	close(p.done)
	n := &p.notice
	n.mu.Lock()
	n.final = true
	fs := n.fs
	n.fs = nil
	n.mu.Unlock()
	for _, f := range fs {
		f(p.exit)
	}
}
