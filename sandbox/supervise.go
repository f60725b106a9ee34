//go:build linux

package sandbox

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// supervise stops the process when ctx ends or the timeout passes, and
// has the exit finalised (finish) once bwrap is reaped: the child says
// when, without a goroutine of ours waiting meanwhile where it can.
func (p *Process) supervise(ctx context.Context) {
	stopWatching := p.watch(ctx)
	p.child.onExit(func(ws unix.WaitStatus, lost bool, err error) {
		defer stopWatching()
		p.finish(ws, lost, err)
	})
}

// finish finalises the exit once bwrap is reaped and every output stream
// has ended, or lets the process go when the launcher detached.
func (p *Process) finish(ws unix.WaitStatus, lost bool, err error) {
	if errors.Is(err, errDetached) {
		p.letGo()
		return
	}
	if err != nil {
		p.l.log.Error("wait for bwrap", "pid", p.Pid(), "err", err)
	}
	close(p.exited)
	facts := p.collect(ws)
	facts.lost = lost
	if p.stdin != nil && p.master == nil {
		p.stdin.Close()
	}
	p.copies.Wait()
	if p.master != nil {
		// The master doubles as stdin: close it only after the copier ended.
		p.master.Close()
	}
	facts.setupMsg = p.head.setupMessage()
	facts.initErr, facts.notFound = p.ctl.finish()
	p.dropSockets()
	p.exit = classify(facts)
	p.exit.Started = p.started
	p.exit.Duration = time.Since(p.started)
	if p.recorded != nil && !lost {
		p.exit = *p.recorded // a previous launcher's, which its caller may not have seen
	}
	p.l.keepExit(p)
	p.announce()
	if p.declined {
		p.Release()
	}
}

// collect gathers what happened, then makes sure nothing of the execution
// survives: the cgroup is killed and removed.
func (p *Process) collect(outer unix.WaitStatus) exitFacts {
	f := exitFacts{outer: outer, cpuLimit: p.policy.Limits.CPUSeconds > 0}
	if p.track != nil {
		select {
		case <-p.track.Done():
		case <-time.After(2 * time.Second):
		}
		if p.track.Complete() {
			var ok bool
			f.workload, ok = p.track.WorkloadExit()
			f.execed = p.track.ExecCount() > initExecs
			f.exact = ok || !p.track.Execed()
		}
		p.l.events.Untrack(p.track)
	}
	p.keptMu.Lock()
	if !f.exact && p.keptCommand != nil {
		// Adopted (or blind) after the sandbox was ended for an exited
		// command: bwrap reports the kill, the notes the command's end.
		f.workload, f.kept = *p.keptCommand, true
	}
	p.keptMu.Unlock()
	if p.cg != nil {
		ev := p.cg.Events()
		f.oomKills, f.pidsHits = ev.OOMKills, ev.PidsMaxHits
		if err := p.cg.Remove(); err != nil {
			p.l.log.Error("remove the execution's cgroup", "pid", p.Pid(), "err", err)
		}
	}
	p.mu.Lock()
	f.killedUs, f.stoppedAs = p.killedUs, p.stopped
	p.mu.Unlock()
	return f
}

// watch stops the process when ctx ends or the policy's timeout passes.
// It uses callbacks, not a goroutine: an idle execution costs no stack.
// The returned function cancels both.
func (p *Process) watch(ctx context.Context) func() {
	stopCtx := context.AfterFunc(ctx, func() { p.Stop(StopCancel) })
	if p.policy.Timeout <= 0 {
		return func() { stopCtx() }
	}
	t := time.AfterFunc(p.policy.Timeout-time.Since(p.started), func() { p.Stop(StopTimeout) })
	return func() { stopCtx(); t.Stop() }
}

// Wait blocks until the process tree is gone and all output was delivered.
func (p *Process) Wait() Exit {
	<-p.done
	return p.exit
}

// Done is closed when Wait would return.
func (p *Process) Done() <-chan struct{} { return p.done }

// Pid returns bwrap's host pid, for logs.
func (p *Process) Pid() int { return p.child.pid() }
