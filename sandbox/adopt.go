//go:build linux

package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/termgate/termgate/sandbox/internal/cgroup"
	"github.com/termgate/termgate/sandbox/internal/keeper"
	"golang.org/x/sys/unix"
)

// ErrNoStateDir reports Adopt or Detach on a launcher without a
// Config.StateDir: its processes die with it, there is nothing to adopt.
var ErrNoStateDir = errors.New("sandbox: the launcher has no state directory")

// processMeta is what the keeper keeps of a process for a later
// launcher: the policy without its environment (secrets stay with the
// caller), the cgroup, and what finding the command again needs.
type processMeta struct {
	Policy  Policy    `json:"policy"`
	Cgroup  []string  `json:"cgroup,omitempty"`
	Started time.Time `json:"started"`
	Argv    []string  `json:"argv,omitempty"`  // the init, then the command
	Bwrap   []string  `json:"bwrap,omitempty"` // bwrap's own argv
	Exit    *Exit     `json:"exit,omitempty"`  // the final exit, kept until Release
	// Command is the command's own wait status, kept before the launcher
	// ended the sandbox the command left (endSandbox): bwrap then
	// reports the kill, not the command's end.
	Command *unix.WaitStatus `json:"command,omitempty"`
}

// meta encodes what a later launcher adopts p from, with what is kept of
// its end (keptCommand, keptExit), within the keeper's bound: the
// command's arguments go first when they do not fit. Its caller holds
// p.keptMu, or has p to itself.
func (p *Process) meta() []byte {
	m := processMeta{Policy: p.policy, Started: p.started, Argv: p.argv, Bwrap: p.bwrapArgs, Exit: p.keptExit, Command: p.keptCommand}
	m.Policy.Env = nil
	if p.cg != nil {
		m.Cgroup = p.cg.Dirs()
	}
	b, _ := json.Marshal(m)
	if len(b) > keeper.MaxMeta {
		m.Argv, m.Bwrap, m.Policy.Command, m.Policy.Binds = nil, nil, m.Policy.Command[:1], nil
		b, _ = json.Marshal(m)
	}
	return b
}

// held lists the parent ends the keeper keeps, in the order adopt takes
// them back: the PTY master, or stdin, stdout and stderr; then the init's
// control socket.
func (p *Process) held() []*os.File {
	if p.master != nil {
		return []*os.File{p.master, p.ctl.f}
	}
	return append(append([]*os.File{p.stdin}, p.outputs...), p.ctl.f)
}

// Key returns Policy.Key.
func (p *Process) Key() string { return p.policy.Key }

// Policy returns the normalized policy the process runs under, without
// its Env, which the init took at the start; for an adopted process whose
// policy was too long to keep, with only the command's first word and no
// Binds.
func (p *Process) Policy() Policy { return p.policy }

// Adopted reports whether a previous launcher started the process.
func (p *Process) Adopted() bool { return p.adopted }

// Adopt returns the processes that a previous launcher on the same
// StateDir left with the keeper, running, exited since, or ended but not
// released (Release), and reads their output on into the writers stdio
// returns for each key. A key stdio declines (false) is killed, released
// and never returned. Call it once, before
// SweepCgroups, which spares the adopted processes' cgroups. When ctx
// ends, the processes are stopped, as with Start; so is a Policy.Timeout,
// counted from the process's start. Their exits are inexact
// (Exit.Exact false): nobody watched their process events before; but
// a process whose exit the previous launcher had final reports that
// Exit again, as it was. A
// process that cannot be adopted is killed, and its error joined to the
// returned one.
func (l *Launcher) Adopt(ctx context.Context, stdio func(key string) (Stdio, bool)) ([]*Process, error) {
	if l.keeper == nil {
		return nil, ErrNoStateDir
	}
	l.cgGuard.markAdopted()
	var procs []*Process
	var errs []error
	client := l.keeper.conn()
	for _, c := range client.Children() {
		proc, err := l.adopt(c)
		if err != nil {
			errs = append(errs, fmt.Errorf("sandbox: adopt %s: %w", c.Key, err))
			continue
		}
		out, ok := stdio(c.Key)
		proc.declined = !ok
		proc.startCopies(out)
		l.track(proc)
		proc.supervise(ctx)
		if !ok {
			proc.Kill()
			continue
		}
		procs = append(procs, proc)
	}
	return procs, errors.Join(errs...)
}

// adopt rebuilds the process of c from the keeper's record. One it cannot
// rebuild is killed; the keeper reaps it, and it is forgotten.
func (l *Launcher) adopt(c keeper.Child) (*Process, error) {
	proc, err := l.rebuild(c)
	if err != nil {
		child := newKeeperChild(l.keeper, l.keeper.conn(), c.Key, c.Pid)
		child.kill()
		closeAll(c.Held)
		go func() { // the keeper reaps it; then its record can go
			child.wait()
			child.c.Forget(c.Key)
		}()
		return nil, err
	}
	return proc, nil
}

// rebuild makes a Process of what the keeper kept: the policy, the held
// descriptors made pollable again, the cgroup.
func (l *Launcher) rebuild(c keeper.Child) (*Process, error) {
	var m processMeta
	if err := json.Unmarshal(c.Meta, &m); err != nil {
		return nil, fmt.Errorf("read the keeper's notes: %w", err)
	}
	if m.Policy.Key != c.Key {
		return nil, fmt.Errorf("the keeper's notes are of %q", m.Policy.Key)
	}
	want := 4
	if m.Policy.TTY != nil {
		want = 2
	}
	if len(c.Held) != want {
		return nil, fmt.Errorf("the keeper held %d descriptors, want %d", len(c.Held), want)
	}
	held, err := pollableAll(c.Held)
	if err != nil {
		return nil, err
	}
	proc := &Process{
		l: l, policy: m.Policy, argv: m.Argv, bwrapArgs: m.Bwrap, started: m.Started, adopted: true,
		ctl:    &initControl{f: held[len(held)-1], released: make(chan struct{})},
		exited: make(chan struct{}), done: make(chan struct{}), head: &headCapture{},
		child: newKeeperChild(l.keeper, l.keeper.conn(), c.Key, c.Pid),
		// The sockets of Policy.Listen died with the launcher that opened them.
		socketsErr: ErrSocketsGone,
	}
	if c.Exited {
		proc.recorded = m.Exit
	}
	proc.keptCommand = m.Command // the command ended, whether bwrap was reaped yet or not
	close(proc.ctl.released)
	if m.Policy.TTY != nil {
		proc.master, proc.stdin = held[0], held[0]
	} else {
		proc.stdin, proc.outputs = held[0], held[1:3]
	}
	if proc.cg, err = l.openCgroup(m); err != nil {
		closeAll(held)
		return nil, err
	}
	return proc, nil
}

// pollableAll re-opens every descriptor non-blocking, through the
// runtime poller, closing the originals.
func pollableAll(files []*os.File) ([]*os.File, error) {
	out := make([]*os.File, 0, len(files))
	for i, f := range files {
		pf, err := pollable(f)
		if err != nil {
			closeAll(out)
			closeAll(files[i+1:])
			return nil, err
		}
		out = append(out, pf)
	}
	return out, nil
}

// openCgroup reopens the cgroup an adopted process's notes name.
func (l *Launcher) openCgroup(m processMeta) (*cgroup.Group, error) {
	if len(m.Cgroup) == 0 {
		return nil, nil
	}
	var cg *cgroup.Group
	var err error
	if m.Policy.Tenant != "" {
		cg, err = l.tenants.Open(m.Policy.Tenant, m.Cgroup)
	} else {
		cg, err = l.cgroups.Open(m.Cgroup)
	}
	if err != nil {
		return nil, fmt.Errorf("reopen its cgroup: %w", err)
	}
	l.cgGuard.keep(m.Cgroup)
	return cg, nil
}

// startCopies reads an adopted process's output on into stdio's writers.
func (p *Process) startCopies(stdio Stdio) {
	outs := p.outputs
	p.outputs, p.copiers = nil, nil
	if p.master != nil {
		p.copy(p.master, stdio.Stdout, true)
		return
	}
	p.copy(outs[0], stdio.Stdout, true)
	p.copy(outs[1], stdio.Stderr, true)
}

// Detach lets go of every process without stopping it, for a planned
// restart: it stops reading their output, closes the launcher's
// descriptors and disconnects from the keeper, whose orphan grace starts.
// Each process's Wait then returns an Exit with Detached set; a later
// launcher on the StateDir adopts them. Start and Adopt fail afterwards.
// Bytes already read are the writers'; the rest wait in the kernel.
func (l *Launcher) Detach() error {
	if l.keeper == nil {
		return ErrNoStateDir
	}
	var err error
	l.keeper.once.Do(func() {
		close(l.keeper.detached)
		l.keeper.mu.Lock()
		procs := make([]*Process, 0, len(l.keeper.procs))
		for _, p := range l.keeper.procs {
			procs = append(procs, p)
		}
		l.keeper.mu.Unlock()
		for _, p := range procs {
			if kc, ok := p.child.(*keeperChild); ok {
				kc.detach()
			}
			<-p.done
		}
		err = l.keeper.conn().Detach()
	})
	return err
}

// letGo ends the launcher's hold on a process it detached from: the
// copiers stop at once (a read under way completes), and the launcher's
// descriptors close; the keeper's copies keep the process going.
func (p *Process) letGo() {
	p.stopCopies.Store(true)
	for _, f := range p.outputs {
		f.SetReadDeadline(time.Unix(1, 0)) // a copier in the poller returns
	}
	for _, c := range p.copiers {
		c.unpark()
	}
	p.copies.Wait()
	close(p.exited)
	if p.master == nil {
		p.stdin.Close()
	} else {
		p.master.Close()
	}
	p.ctl.close()
	p.dropSockets()
	if p.track != nil {
		p.l.events.Untrack(p.track)
	}
	p.exit = Exit{Code: -1, Detached: true, Started: p.started, Duration: time.Since(p.started)}
	p.announce()
}
