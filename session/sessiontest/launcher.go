// Package sessiontest provides a fake session.Launcher that runs a script
// instead of a sandbox, so the supervisor and the gateway above it can be
// tested fast, anywhere, and under testing/synctest with fake time.
//
// It is for tests only.
package sessiontest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/session"
)

// Launcher is a fake session.Launcher. Its zero value starts processes
// that exit 0 at once.
type Launcher struct {
	// Script runs on its own goroutine for each process and returns its
	// exit; nil exits 0 at once.
	Script func(p *Proc) sandbox.Exit
	// Err, when set, is returned by Start.
	Err error
	// Keep makes processes outlive their supervisor: Detach lets go of
	// them, and Adopt hands the running ones to the next supervisor, as
	// a sandbox launcher with a state directory does.
	Keep bool

	mu    sync.Mutex
	procs []*Proc
}

// Start records a process and runs the script for it.
func (l *Launcher) Start(_ context.Context, pol sandbox.Policy, stdio sandbox.Stdio) (session.Process, error) {
	if l.Err != nil {
		return nil, l.Err
	}
	p := &Proc{Policy: pol, Stdio: stdio, stopped: make(chan sandbox.Stop, 1), done: make(chan struct{}), detached: make(chan struct{})}
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	go func() {
		exit := sandbox.Exit{Code: 0, Exact: true}
		if l.Script != nil {
			exit = l.Script(p)
		}
		p.mu.Lock()
		p.exit = exit
		p.mu.Unlock()
		close(p.done)
		p.notify()
	}()
	return p, nil
}

// Adopt hands the running processes to a new supervisor, with new output
// writers; with Keep unset it adopts nothing.
func (l *Launcher) Adopt(_ context.Context, stdio func(key string) (sandbox.Stdio, bool)) ([]session.Adopted, error) {
	if !l.Keep {
		return nil, nil
	}
	var out []session.Adopted
	for _, p := range l.Procs() {
		p.mu.Lock()
		collected := p.collected
		p.mu.Unlock()
		if collected {
			continue // its exit went to the supervisor that ran it
		}
		io, ok := stdio(p.Policy.Key)
		if !ok {
			p.Stop(sandbox.StopCancel)
			continue
		}
		p.mu.Lock()
		p.Stdio, p.detached = io, make(chan struct{})
		p.mu.Unlock()
		out = append(out, p)
	}
	return out, nil
}

// Detach lets go of every process: their Wait returns a zero Exit at
// once, and they run on until a new supervisor adopts them.
func (l *Launcher) Detach() error {
	for _, p := range l.Procs() {
		p.mu.Lock()
		close(p.detached)
		p.mu.Unlock()
		p.notify()
	}
	return nil
}

// Procs returns the processes started so far, oldest first.
func (l *Launcher) Procs() []*Proc {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Proc(nil), l.procs...)
}

// Proc is a fake session.Process: it records what the supervisor did to
// it. A script writes output to Stdio and learns of a stop on Stopped.
type Proc struct {
	Policy sandbox.Policy // as started
	Stdio  sandbox.Stdio  // as started

	stopped   chan sandbox.Stop
	done      chan struct{}
	detached  chan struct{}      // closed by Detach; replaced by Adopt
	collected bool               // Wait returned the exit
	onExit    func(sandbox.Exit) // OnExit's callback, until it is called

	mu      sync.Mutex
	stdin   bytes.Buffer
	closed  bool
	signals []syscall.Signal
	sizes   []sandbox.WindowSize
	exit    sandbox.Exit
}

// Key is the policy's key (session.Adopted).
func (p *Proc) Key() string { return p.Policy.Key }

// Out returns the process's current output writers: a script of a kept
// process uses it, since Adopt replaces them.
func (p *Proc) Out() sandbox.Stdio {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Stdio
}

// Stopped delivers the reason of the first Stop.
func (p *Proc) Stopped() <-chan sandbox.Stop { return p.stopped }

// Input returns the input written so far and whether stdin was closed.
func (p *Proc) Input() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdin.String(), p.closed
}

// Signals returns the signals sent so far.
func (p *Proc) Signals() []syscall.Signal {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]syscall.Signal(nil), p.signals...)
}

// Sizes returns the window sizes set so far.
func (p *Proc) Sizes() []sandbox.WindowSize {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]sandbox.WindowSize(nil), p.sizes...)
}

// Stdin returns the process's recorded input.
func (p *Proc) Stdin() io.WriteCloser { return stdin{p} }

// Resize records ws.
func (p *Proc) Resize(ws sandbox.WindowSize) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sizes = append(p.sizes, ws)
	return nil
}

// Signal records s; the script decides what it does.
func (p *Proc) Signal(s syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signals = append(p.signals, s)
	return nil
}

// Stop tells the script why it should end, once.
func (p *Proc) Stop(why sandbox.Stop) {
	select {
	case p.stopped <- why:
	default:
	}
}

// Wait returns the script's exit once it returned, or a zero Exit once
// the launcher detached.
func (p *Proc) Wait() sandbox.Exit {
	p.mu.Lock()
	detached := p.detached
	p.mu.Unlock()
	select {
	case <-p.done:
	case <-detached:
		return sandbox.Exit{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-detached:
		return sandbox.Exit{} // left for the next supervisor
	default:
	}
	p.collected = true
	return p.exit
}

// OnExit calls f once with what Wait would return, as soon as it would
// return, as *sandbox.Process does: on the script's goroutine or
// Detach's, or at once when the exit is known. A later call replaces a
// callback not yet called.
func (p *Proc) OnExit(f func(sandbox.Exit)) {
	p.mu.Lock()
	p.onExit = f
	p.mu.Unlock()
	p.notify()
}

// notify calls the OnExit callback once Wait would return: a zero Exit
// once detached, else the script's.
func (p *Proc) notify() {
	p.mu.Lock()
	f := p.onExit
	var exit sandbox.Exit
	switch {
	case f == nil:
	case isClosed(p.detached):
	case isClosed(p.done):
		p.collected, exit = true, p.exit
	default:
		f = nil
	}
	if f != nil {
		p.onExit = nil
	}
	p.mu.Unlock()
	if f != nil {
		f(exit)
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

type stdin struct{ p *Proc }

func (w stdin) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	if w.p.closed {
		return 0, errors.New("sessiontest: stdin closed")
	}
	return w.p.stdin.Write(b)
}

func (w stdin) Close() error {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	w.p.closed = true
	return nil
}

// UntilStopped is a script that runs until stopped and then exits by
// SIGTERM, like a process without a TERM handler.
func UntilStopped(p *Proc) sandbox.Exit {
	why := <-p.stopped
	return sandbox.Exit{Code: -1, Signal: syscall.SIGTERM, Stopped: why, Exact: true}
}

// SleepArg is a script that exits 0 after the duration in the policy's
// second argument ("sleep 2s"), unless stopped first.
func SleepArg(p *Proc) sandbox.Exit {
	d, _ := time.ParseDuration(p.Policy.Command[1])
	return SleepFor(d, 0)(p)
}

// SleepFor is a script that exits with code after d of (possibly fake)
// time, unless stopped first.
func SleepFor(d time.Duration, code int) func(*Proc) sandbox.Exit {
	return func(p *Proc) sandbox.Exit {
		select {
		case <-time.After(d):
			return sandbox.Exit{Code: code, Exact: true}
		case why := <-p.stopped:
			return sandbox.Exit{Code: -1, Signal: syscall.SIGTERM, Stopped: why, Exact: true}
		}
	}
}
