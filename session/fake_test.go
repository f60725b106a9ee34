package session

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/termgate/termgate/sandbox"
)

// fakeLauncher runs a script instead of a sandbox, so the supervisor's
// logic can be tested under testing/synctest with fake time.
type fakeLauncher struct {
	script func(p *fakeProc) sandbox.Exit // runs on its own goroutine; returns the exit
	err    error                          // returned by Start when set
	mu     sync.Mutex
	procs  []*fakeProc
}

func (l *fakeLauncher) Start(_ context.Context, pol sandbox.Policy, stdio sandbox.Stdio) (Process, error) {
	if l.err != nil {
		return nil, l.err
	}
	p := &fakeProc{policy: pol, stdio: stdio, stopped: make(chan sandbox.Stop, 1), done: make(chan struct{})}
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	go func() {
		exit := sandbox.Exit{Code: 0, Exact: true}
		if l.script != nil {
			exit = l.script(p)
		}
		p.mu.Lock()
		p.exit = exit
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// fakeProc records what the supervisor did to it.
type fakeProc struct {
	policy  sandbox.Policy
	stdio   sandbox.Stdio
	stopped chan sandbox.Stop
	done    chan struct{}

	mu      sync.Mutex
	stdin   bytes.Buffer
	closed  bool
	signals []syscall.Signal
	sizes   []sandbox.WindowSize
	exit    sandbox.Exit
}

func (p *fakeProc) Stdin() io.WriteCloser { return fakeStdin{p} }
func (p *fakeProc) Resize(ws sandbox.WindowSize) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sizes = append(p.sizes, ws)
	return nil
}
func (p *fakeProc) Signal(s syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signals = append(p.signals, s)
	return nil
}
func (p *fakeProc) Stop(why sandbox.Stop) {
	select {
	case p.stopped <- why:
	default:
	}
}
func (p *fakeProc) Wait() sandbox.Exit {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

func (p *fakeProc) input() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdin.String(), p.closed
}

type fakeStdin struct{ p *fakeProc }

func (w fakeStdin) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	if w.p.closed {
		return 0, errors.New("closed")
	}
	return w.p.stdin.Write(b)
}

func (w fakeStdin) Close() error {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	w.p.closed = true
	return nil
}

// untilStopped is a script that runs until stopped and then exits by
// SIGTERM, like a process without a TERM handler.
func untilStopped(p *fakeProc) sandbox.Exit {
	why := <-p.stopped
	return sandbox.Exit{Code: -1, Signal: syscall.SIGTERM, Stopped: why, Exact: true}
}

// sleepArg is a script that exits 0 after the duration in the policy's
// second argument, unless stopped first.
func sleepArg(p *fakeProc) sandbox.Exit {
	d, _ := time.ParseDuration(p.policy.Command[1])
	return sleepFor(d, 0)(p)
}

// sleepFor is a script that exits with code after d of (fake) time,
// unless stopped first.
func sleepFor(d time.Duration, code int) func(*fakeProc) sandbox.Exit {
	return func(p *fakeProc) sandbox.Exit {
		select {
		case <-time.After(d):
			return sandbox.Exit{Code: code, Exact: true}
		case why := <-p.stopped:
			return sandbox.Exit{Code: -1, Signal: syscall.SIGTERM, Stopped: why, Exact: true}
		}
	}
}
