package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/session/internal/statedir"
)

// Adopter is implemented by a Launcher whose processes outlive the
// supervisor (a sandbox launcher with a state directory): Restore adopts
// what an earlier supervisor left running, Detach lets go of every
// process without stopping it.
type Adopter interface {
	// Adopt returns the processes an earlier launcher left, running or
	// ended since. stdio gives each its output writers before anything is
	// read; a process it answers false for is stopped.
	Adopt(ctx context.Context, stdio func(key string) (sandbox.Stdio, bool)) ([]Adopted, error)
	Detach() error
}

// Adopted is an adopted process: a Process and its key (Policy.Key).
type Adopted interface {
	Process
	Key() string
}

// Restored counts what Restore found.
type Restored struct {
	Running int `json:"running"` // live executions adopted
	Ended   int `json:"ended"`   // ended executions whose retention goes on
	Lost    int `json:"lost"`    // running when the earlier supervisor stopped, and gone since
	Gone    int `json:"gone"`    // tombstones: answered ErrGone
}

// Restore takes over the executions an earlier supervisor left in
// Config.StateDir. Call it once, before the first Start. Without a state
// directory it does nothing.
func (s *Supervisor) Restore(ctx context.Context) (Restored, error) {
	var n Restored
	if s.store == nil {
		return n, nil
	}
	entries, err := os.ReadDir(s.store.ExecutionsDir())
	if err != nil {
		return n, fmt.Errorf("session: restore: %w", err)
	}
	// Every record is read before anything is changed: a directory
	// another termgate wrote is refused whole.
	type found struct {
		dir string
		rec *record
		err error
	}
	all := make([]found, 0, len(entries))
	for _, ent := range entries {
		dir := filepath.Join(s.store.ExecutionsDir(), ent.Name())
		rec, err := statedir.ReadRecord[Spec, Result](dir)
		if errors.Is(err, ErrStateVersion) {
			return n, fmt.Errorf("session: restore: %w; run that termgate on it, or another --state-dir", err)
		}
		all = append(all, found{dir, rec, err})
	}
	byKey := map[string]*execution{}
	for _, f := range all {
		if e := s.restoreOne(f.dir, f.rec, f.err, &n); e != nil {
			byKey[filepath.Base(f.dir)] = e
		}
	}
	if err := s.adopt(ctx, byKey, &n); err != nil {
		return n, err
	}
	for _, e := range byKey {
		e.mu.Lock() // an adopted execution may be finishing on its process's goroutine
		lost := e.res == nil && e.proc == nil
		e.mu.Unlock()
		if lost {
			n.Lost++
			close(e.launched)
			e.finish(sandbox.Exit{Code: -1, Lost: true, Started: e.started})
		}
	}
	if s.casts != nil {
		s.casts.startSweeping() // the recordings being written are known now
	}
	s.log.Info("state restored", "dir", s.store.Dir(), "running", n.Running, "ended", n.Ended, "lost", n.Lost, "gone", n.Gone)
	return n, nil
}

// restoreOne takes over one execution's directory from its record
// (statedir.ReadRecord's answer). It returns the execution
// when it is live or retained, after registering it; nil otherwise.
func (s *Supervisor) restoreOne(dir string, rec *record, err error, n *Restored) *execution {
	if err != nil {
		// A start killed before its record was written never started
		// its process: nothing to keep.
		s.log.Warn("state: dropping an execution directory without a record", "dir", dir, "err", err)
		os.RemoveAll(dir)
		return nil
	}
	k := key{rec.Owner, rec.ID}
	if filepath.Base(dir) != statedir.DirKey(k.owner, k.id) {
		s.log.Warn("state: dropping a record in the wrong directory", "dir", dir, "execution", rec.ID)
		os.RemoveAll(dir)
		return nil
	}
	now := time.Now()
	switch {
	case !rec.Gone.IsZero():
		if now.Sub(rec.Gone) >= TombstoneRetention {
			os.RemoveAll(dir)
			return nil
		}
		s.addTombstone(k, rec.Gone)
		n.Gone++
		return nil
	case rec.Result != nil && !now.Before(rec.Expires):
		s.bury(dir, rec, "retention ended while no server ran")
		n.Gone++
		return nil
	}
	e, err := s.restoreExecution(rec)
	if err != nil {
		s.log.Error("state: cannot restore execution", "execution", rec.ID, "tenant", rec.Owner, "err", err)
		s.bury(dir, rec, err.Error())
		n.Gone++
		return nil
	}
	if rec.Result != nil {
		n.Ended++
	}
	return e
}

// bury turns an execution's directory into a tombstone.
func (s *Supervisor) bury(dir string, rec *record, why string) {
	rec.Gone = time.Now()
	statedir.RemoveData(dir)
	if err := statedir.WriteRecord(dir, rec, false); err != nil {
		s.log.Error("state: cannot keep a tombstone", "execution", rec.ID, "err", err)
		os.RemoveAll(dir)
		return
	}
	s.log.Info("execution gone", "execution", rec.ID, "tenant", rec.Owner, "why", why)
	s.addTombstone(key{rec.Owner, rec.ID}, rec.Gone)
}

// addTombstone remembers that k is gone, dropping the oldest tombstone
// beyond maxTombstones.
func (s *Supervisor) addTombstone(k key, since time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.gone) >= maxTombstones {
		var oldest key
		var at time.Time
		for gk, t := range s.gone {
			if at.IsZero() || t.Before(at) {
				oldest, at = gk, t
			}
		}
		delete(s.gone, oldest)
		os.RemoveAll(s.store.Path(oldest.owner, oldest.id))
	}
	s.gone[k] = since
}

// goneLocked reports whether k is a tombstone, dropping an expired one.
// Called with s.mu held.
func (s *Supervisor) goneLocked(k key) bool {
	since, ok := s.gone[k]
	if ok && time.Since(since) >= TombstoneRetention {
		delete(s.gone, k)
		os.RemoveAll(s.store.Path(k.owner, k.id))
		return false
	}
	return ok
}

// restoreExecution rebuilds an execution from its record and registers
// it: running ones wait for their process in adopt.
func (s *Supervisor) restoreExecution(rec *record) (*execution, error) {
	spec, err := s.normalize(rec.Spec)
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	k := key{rec.Owner, rec.ID}
	e, err := newExecution(s, k, spec, rec.SpecFingerprint(), rec)
	if err != nil {
		return nil, err
	}
	e.netPolicy = rec.Network // a change made while it ran
	s.mu.Lock()
	s.execs[k] = e
	s.held[k.owner]++
	s.wg.Add(1)
	if e.res == nil {
		s.running++
		s.byOwner[k.owner]++
	}
	s.mu.Unlock()
	if e.res != nil {
		e.retainUntil(rec.Expires)
	}
	return e, nil
}

// restoreCapture refills the final output's capture from the output the
// ring kept. Output evicted before the restart is counted as omitted.
func (e *execution) restoreCapture() {
	first, _ := e.ring.Bounds()
	evs, _ := e.ring.Read(nil, first-min(first, 1), 0, 0)
	var seen [replay.StreamStderr + 1]bool
	for _, ev := range evs {
		if ev.Kind != replay.KindOutput {
			continue
		}
		h := e.stdout
		if ev.Stream == replay.StreamStderr {
			h = e.stderr
		}
		if !seen[ev.Stream] {
			seen[ev.Stream] = true
			h.lose(int64(ev.Offset))
		}
		h.Write(ev.Data)
	}
}

// adopt matches the launcher's processes with the restored executions
// and starts supervising them.
func (s *Supervisor) adopt(ctx context.Context, byKey map[string]*execution, n *Restored) error {
	a, ok := s.cfg.Launcher.(Adopter)
	if !ok {
		return nil
	}
	procs, err := a.Adopt(ctx, func(k string) (sandbox.Stdio, bool) {
		e := byKey[k]
		if e == nil || e.res != nil {
			return sandbox.Stdio{}, false
		}
		return e.stdio(), true
	})
	if err != nil {
		return fmt.Errorf("session: adopt: %w", err)
	}
	for _, p := range procs {
		e := byKey[p.Key()]
		e.mu.Lock()
		e.proc = p
		e.mu.Unlock()
		close(e.launched)
		e.supervise(p)
		e.guardNetwork(p, true)
		n.Running++
		s.log.Info("execution adopted", e.logAttrs...)
	}
	return nil
}

// Detach lets go of every execution without stopping it, for a restart:
// a supervisor started on the same state directory takes them over
// (Restore). Start then fails with ErrClosed. Without a launcher that
// can detach, it is Close.
func (s *Supervisor) Detach(ctx context.Context) error {
	a, ok := s.cfg.Launcher.(Adopter)
	if !ok || s.store == nil {
		return s.Close(ctx)
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.recording.Lock()
	s.detached.Store(true)
	s.recording.Unlock()
	s.stopIO()
	err := a.Detach()
	// Output no longer moves: each terminal's screen state stands for
	// exactly its ring's evicted events.
	s.mu.Lock()
	es := make([]*execution, 0, len(s.execs))
	for _, e := range s.execs {
		es = append(es, e)
	}
	s.mu.Unlock()
	for _, e := range es {
		if e.result() == nil {
			e.saveScreen()
		}
		e.stopRecorder()
	}
	s.closeCasts()
	return err
}
