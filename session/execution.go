package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/netpolicy"
	"github.com/termgate/termgate/session/execid"
	"github.com/termgate/termgate/session/internal/statedir"
	"golang.org/x/sys/unix"
)

// execution is one supervised process. Only exited, called once when the
// process ended (supervise), finalises it.
type execution struct {
	s           *Supervisor
	key         key
	spec        Spec
	fingerprint fingerprint
	incarnation string
	ring        *replay.Ring
	screen      *screenState // a PTY's emulator behind the ring; nil for pipes
	stdout      *headTail
	stderr      *headTail
	in          *inputQueue
	launched    chan struct{} // closed once the launch succeeded or failed
	launchErr   error         // set before launched closes when the sandbox refused the spec
	done        chan struct{} // closed once the result is final
	dir         string        // the state directory of a durable execution (session/internal/statedir)
	logAttrs    []any         // of its lifecycle log lines: which, whose, what program, who started it
	startAttrs  []any         // WithLogAttrs' attributes of its start, for OnEnd
	rec         *recorder     // its recorder while it is recorded here (recording.go)
	resizes     resizes       // its resizes, coalesced (resize.go)
	recName     string        // its recording's file name; empty when not recorded
	recCut      bool          // its recording was cut by a restart

	mu        sync.Mutex
	proc      Process
	started   time.Time
	stopping  Status // cancelled or timed_out, once termgate decided to stop it
	res       *Result
	retention *time.Timer
	flow      flow
	timeouts  timeouts
	guard     *netpolicy.Guard      // its proxy, with a network policy (network.go)
	netPolicy string                // its network policy when changed since the start
	netFinal  netpolicy.GuardStatus // its proxy's counters, once it ended
	failed    string                // why termgate stopped it as failed, once it did
}

// newExecution makes an execution of spec, with every part of it: a new
// one when was is nil, its storage made (in its state directory for a
// durable one); else the one an earlier supervisor left in its state
// directory, rebuilt from its record was. Its caller registers it.
func newExecution(s *Supervisor, k key, spec Spec, fp fingerprint, was *record) (*execution, error) {
	e := &execution{
		logAttrs: baseLogAttrs(k, spec),
		s:        s, key: k, spec: spec, fingerprint: fp, incarnation: execid.NewIncarnation(),
		stdout:   newHeadTail(spec.OutputBudget),
		stderr:   newHeadTail(spec.OutputBudget),
		in:       newInputQueue(s.cfg.InputBuffer, &s.counters.inputBytes),
		launched: make(chan struct{}),
		done:     make(chan struct{}),
		started:  time.Now(),
	}
	if was != nil {
		e.incarnation, e.started, e.res = was.Incarnation, was.Started, was.Result
	}
	if err := e.makeStorage(was); err != nil {
		return nil, err
	}
	if err := e.makeRecording(was); err != nil {
		if e.dir != "" {
			os.RemoveAll(e.dir)
		}
		return nil, err
	}
	if e.res != nil {
		close(e.launched)
		close(e.done)
		return e, nil
	}
	e.makeScreen()
	// Output waits for the first acknowledging writer as for one who
	// left, from what a restored ring holds on.
	first, _ := e.ring.Bounds()
	e.parkLocked(first - min(first, 1))
	return e, nil
}

// makeStorage makes the ring, in memory or, for a durable execution, in
// its state directory with its input file; or, for an execution an
// earlier supervisor left (was), recovers them.
func (e *execution) makeStorage(was *record) error {
	switch {
	case e.s.store == nil:
		e.ring = replay.New(e.spec.Ring)
		return nil
	case was != nil:
		return e.recoverStorage(was)
	}
	dir, err := e.s.store.Create(e.key.owner, e.key.id)
	if err != nil {
		return err
	}
	if e.ring, err = statedir.NewRing(dir, statedir.RingBounds(e.spec.Ring)); err == nil {
		e.in.log, err = statedir.CreateInput(dir, e.s.cfg.InputBuffer)
	}
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	e.dir = dir
	return nil
}

// recoverStorage recovers the ring an earlier supervisor left and, while
// the execution runs, its input and final output.
func (e *execution) recoverStorage(was *record) error {
	e.dir = e.s.store.Path(e.key.owner, e.key.id)
	var err error
	if e.ring, err = statedir.RecoverRing(e.dir, was.Ring); err != nil {
		return fmt.Errorf("ring: %w", err)
	}
	if was.Result != nil {
		return nil
	}
	log, pending, err := statedir.ReopenInput(e.dir, e.s.cfg.InputBuffer)
	if err != nil {
		return err
	}
	if n := log.InFlight(); n > 0 {
		// Written again rather than lost: at most one piece.
		e.s.log.Warn("input possibly written twice: the last server was killed while writing it",
			append([]any{"input_offset", log.Written(), "bytes", n}, e.logAttrs...)...)
	}
	e.in.restore(log, log.AcceptedAt(), pending)
	e.restoreCapture()
	return nil
}

// makeRecording starts a new execution's recording when its spec asks
// for one, or goes on with (or cuts) a restored execution's.
func (e *execution) makeRecording(was *record) error {
	switch {
	case was != nil:
		e.restoreRecording(was.Result == nil)
		return nil
	case !e.spec.Record:
		return nil
	}
	if err := e.startRecording(); err != nil {
		return err
	}
	e.in.onAccept = e.rec.record
	return nil
}

// makeScreen gives a terminal its screen state: a fresh emulator while
// its ring never evicted, else (restored) one seeded with the screen
// Detach kept when it stands for exactly the evicted events, else none
// (a reader behind the ring gets a gap).
func (e *execution) makeScreen() {
	tty := e.spec.Policy.TTY
	if tty == nil || newTerminal == nil || e.s.cfg.NoScreenState {
		return
	}
	rows, cols := int(tty.Rows), int(tty.Cols)
	var pending []byte
	if first, _ := e.ring.Bounds(); first > 1 {
		sc, ok := statedir.ReadScreen(e.dir)
		if !ok || sc.Seq != first-1 || sc.Rows <= 0 || sc.Cols <= 0 {
			return
		}
		rows, cols, pending = sc.Rows, sc.Cols, sc.Data
	}
	e.screen = e.s.newScreenState(e, rows, cols)
	e.screen.pending = pending
	e.ring.OnEvict(e.screen.evicted)
}

// record writes a durable execution's record.json, the start's first
// when first; nothing otherwise, and nothing once the supervisor
// detached: the next one owns the files.
func (e *execution) record(first bool) {
	if e.dir == "" || e.s.detached.Load() {
		return
	}
	// The spec's JSON, which the fingerprint digests: e.spec never changes.
	fingerprint, _ := json.Marshal(e.spec)
	e.mu.Lock()
	rec := &record{
		Owner: e.key.owner, ID: e.key.id, Incarnation: e.incarnation, Fingerprint: string(fingerprint),
		Spec: e.spec, Ring: statedir.RingBounds(e.spec.Ring), Started: e.started, Result: e.res, Network: e.netPolicy,
	}
	if e.res != nil {
		rec.Expires = e.res.Ended.Add(e.spec.Retention)
	}
	e.mu.Unlock()
	if err := statedir.WriteRecord(e.dir, rec, first); err != nil {
		e.s.log.Error("cannot record the execution's state", "execution", e.key.id, "tenant", e.key.owner, "err", err)
	}
}

// stdio returns the writers of the execution's output.
func (e *execution) stdio() sandbox.Stdio {
	out := replay.StreamStdout
	if e.spec.Policy.TTY != nil {
		out = replay.StreamPTY
	}
	return sandbox.Stdio{
		Stdout: e.writer(outputWriter{e.s.io, e.ring, out, e.stdout, e.screen, &e.s.counters}),
		Stderr: e.writer(outputWriter{e.s.io, e.ring, replay.StreamStderr, e.stderr, nil, &e.s.counters}),
	}
}

// launch starts the sandbox. The started event comes first, so output the
// process writes before Start returns already has its place after it.
func (s *Supervisor) launch(e *execution) (Info, error) {
	started := replay.Event{Kind: replay.KindStarted}
	if tty := e.spec.Policy.TTY; tty != nil {
		started.Rows, started.Cols = tty.Rows, tty.Cols
	}
	e.ring.Append(started)
	e.record(true)
	policy := e.spec.Policy
	if e.dir != "" {
		policy.Key = filepath.Base(e.dir)
	}
	t0 := time.Now()
	proc, err := s.cfg.Launcher.Start(s.ctx, policy, e.stdio())
	if err != nil {
		return s.launchFailed(e, err)
	}
	s.counters.started(time.Since(t0))
	e.mu.Lock()
	e.proc = proc
	e.mu.Unlock()
	close(e.launched)
	s.log.Info("execution started", e.logAttrs...)
	e.supervise(proc)
	e.guardNetwork(proc, false)
	return e.info(), nil
}

// launchFailed forgets an execution whose spec the sandbox refused (the
// client's mistake, nothing ran), and keeps any other failure as a failed
// execution so that a retried start reports the same outcome.
//
// Running out of file descriptors is neither: the start is forgotten and
// answered ErrOutOfDescriptors, so a retry can succeed once some are
// free, and the cause (which may name host paths) goes to the log only.
func (s *Supervisor) launchFailed(e *execution, err error) (Info, error) {
	if OutOfDescriptors(err) {
		s.log.Warn("execution refused: out of file descriptors", "execution", e.key.id, "tenant", e.key.owner, "err", err)
		err = ErrOutOfDescriptors
		s.counters.refuse(RefusedDescriptors)
	}
	if errors.Is(err, ErrCapacity) || errors.Is(err, sandbox.ErrInvalidPolicy) || errors.Is(err, sandbox.ErrUnenforceable) {
		s.forget(e)
		e.unpin()
		e.abandonRecording()
		e.launchErr = err
		close(e.launched)
		close(e.done)
		return Info{}, err
	}
	s.log.Error("execution failed to start", append(e.logAttrs, "err", err)...)
	close(e.launched)
	e.finish(sandbox.Exit{Code: -1, SetupError: err.Error(), Started: e.started})
	return e.info(), nil
}

// exitNotifier is the part of *sandbox.Process that reports the end
// without a goroutine waiting for it.
type exitNotifier interface {
	OnExit(func(sandbox.Exit))
}

// supervise starts supervising proc: it enforces the timeouts
// (timeout.go), feeds input, and finalises once the process tree is gone
// and all output is in the ring (exited). A process that reports its end
// (exitNotifier) costs no goroutine of ours while it runs; for another,
// one goroutine owns its Wait.
func (e *execution) supervise(proc Process) {
	e.s.runs.Add(1)
	e.armTimeouts()
	e.in.attach(proc.Stdin())
	if n, ok := proc.(exitNotifier); ok {
		n.OnExit(func(exit sandbox.Exit) { e.exited(proc, exit) })
		return
	}
	go func() { e.exited(proc, proc.Wait()) }()
}

// exited finalises the execution once proc ended with exit. It is called
// once per supervise.
func (e *execution) exited(proc Process, exit sandbox.Exit) {
	defer e.s.runs.Done()
	e.disarmTimeouts()
	e.in.shutdown()
	e.in.wait()
	// Detach waits for a finish under way, so that its record is written
	// before the next supervisor reads it.
	e.s.recording.RLock()
	defer e.s.recording.RUnlock()
	if e.s.detached.Load() {
		return // the next supervisor finishes it, and writes what input is left
	}
	e.finish(exit)
	// Recorded: the sandbox may now forget the exit. Until then, a
	// supervisor started after a crash is handed it again.
	if r, ok := proc.(interface{ Release() error }); ok {
		if err := r.Release(); err != nil {
			e.s.log.Warn("release the ended process", "execution", e.key.id, "err", err)
		}
	}
}

// stop asks the process to end: SIGTERM, then SIGKILL after the grace
// period. The first reason given is the one reported.
func (e *execution) stop(why Status) error { return e.stopAs(why, false) }

// stopAs is stop; idle says that the idle timeout stops it.
func (e *execution) stopAs(why Status, idle bool) error {
	e.mu.Lock()
	proc := e.proc
	if e.res != nil || proc == nil {
		e.mu.Unlock()
		return ErrNotRunning
	}
	first := e.stopping == ""
	if first {
		e.stopping = why
		e.timeouts.idleStop = idle
	}
	e.mu.Unlock()
	if !first {
		return nil // already stopping: one signal event, one escalation
	}
	e.unpin()
	e.ring.Append(replay.Event{Kind: replay.KindSignal, Signal: int(unix.SIGTERM)})
	reason := sandbox.StopCancel
	if why == StatusTimedOut {
		reason = sandbox.StopTimeout
	}
	proc.Stop(reason)
	return nil
}

// finish records the result, appends the exit event (always the last),
// and starts the retention timer.
func (e *execution) finish(exit sandbox.Exit) {
	recording := e.recordingResult()
	e.mu.Lock()
	status, reason, ringReason := e.classify(exit)
	res := &Result{
		Status: status, ExitCode: exit.Code, Reason: reason,
		Started: e.started, Ended: time.Now(),
		Stdout: e.stdout.result(), Stderr: e.stderr.result(), Recording: recording,
	}
	res.Duration = res.Ended.Sub(res.Started)
	if exit.Signal != 0 {
		res.Signal = unix.SignalName(exit.Signal)
	}
	e.res = res
	e.unparkLocked()
	e.mu.Unlock()
	e.closeGuard()
	e.ring.Append(replay.Event{Kind: replay.KindExit, Exit: &replay.ExitInfo{
		Code: exit.Code, Signal: int(exit.Signal), Reason: ringReason, Duration: res.Duration,
	}})
	if e.screen != nil {
		e.screen.finish()
	}
	e.s.settled(e, status, ringReason)
	e.record(false)
	e.s.log.Info("execution ended", append(e.logAttrs, "status", status, "reason", ringReason, "exit_code", exit.Code,
		"signal", res.Signal, "duration", res.Duration.Seconds(), "stdout_bytes", res.Stdout.Original, "stderr_bytes", res.Stderr.Original)...)
	e.ended()
	e.startRetention()
	close(e.done)
}

// classify maps a sandbox exit to a status, a reason for people, and the
// exit event's reason. Called with e.mu held.
func (e *execution) classify(exit sandbox.Exit) (status Status, reason, ringReason string) {
	switch {
	case exit.Lost:
		return StatusFailed, "lost: " + exit.String(), "lost"
	case exit.SetupError != "":
		return StatusFailed, "could not start: " + exit.SetupError, string(StatusFailed)
	case e.failed != "":
		return StatusFailed, e.failed + "; " + exit.String(), string(StatusFailed)
	case e.stopping == StatusTimedOut:
		reason, ringReason := e.timeoutReason(exit)
		return StatusTimedOut, reason, ringReason
	case e.stopping == StatusCancelled || exit.Stopped == sandbox.StopCancel:
		return StatusCancelled, "cancelled; " + exit.String(), string(StatusCancelled)
	case exit.Limit != "":
		return StatusLimit, string(exit.Limit) + " ceiling; " + exit.String(), string(StatusLimit) + ":" + string(exit.Limit)
	}
	return StatusExited, exit.String(), string(StatusExited)
}

// startRetention removes the execution when its retention expires.
func (e *execution) startRetention() { e.retainUntil(time.Now().Add(e.spec.Retention)) }

// retainUntil removes the execution at end.
func (e *execution) retainUntil(end time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.retention = time.AfterFunc(time.Until(end), func() {
		e.s.mu.Lock()
		e.s.removeLocked(e)
		e.s.mu.Unlock()
	})
}

// stopRetention cancels the timer when the execution is removed early.
func (e *execution) stopRetention() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.retention != nil {
		e.retention.Stop()
	}
}

func (e *execution) result() *Result {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.res
}

func (e *execution) info() Info {
	first, last := e.ring.Bounds()
	offset := e.in.received()
	e.mu.Lock()
	defer e.mu.Unlock()
	in := Info{
		ID: e.key.id, Owner: e.key.owner, Status: StatusRunning, PTY: e.spec.Policy.TTY != nil,
		Started: e.started, FirstSeq: first, LastSeq: last, InputOffset: offset, Result: e.res,
		Incarnation: e.incarnation, Live: e.spec.Live, Recorded: e.recName != "", Network: e.networkLocked(),
	}
	if e.res != nil {
		in.Status = e.res.Status
	}
	in.Cwd, in.Workdir = workdir(e.spec.Policy)
	return in
}

// workdir is a policy's working directory inside the sandbox, and
// relative to its workspace ("" when outside it).
func workdir(p sandbox.Policy) (cwd, rel string) {
	if p.WorkspaceMount == "" {
		p.WorkspaceMount = sandbox.DefaultWorkspaceMount
	}
	cwd = path.Clean(p.Cwd)
	if p.Cwd == "" {
		cwd = p.WorkspaceMount
	}
	switch rest, ok := strings.CutPrefix(cwd, path.Clean(p.WorkspaceMount)); {
	case ok && rest == "":
		return cwd, "."
	case ok && strings.HasPrefix(rest, "/"):
		return cwd, rest[1:]
	}
	return cwd, ""
}

// running returns the process, or ErrNotRunning once it ended.
func (e *execution) running() (Process, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.res != nil || e.proc == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotRunning, e.key.id)
	}
	return e.proc, nil
}

// outputWriter appends a stream's bytes to the ring and the final output.
// Then, while the ring is full of output that acknowledging writers hold,
// it waits (flow.go): the sandbox reads no more of the stream, and the
// program waits in write(2). Otherwise it never blocks; ctx (the
// supervisor's) ends any wait.
type outputWriter struct {
	ctx     context.Context
	ring    *replay.Ring
	stream  replay.Stream
	capture *headTail
	screen  *screenState // fed what the append evicted; nil for pipes
	counts  *counters    // the supervisor's (metrics.go)
}

func (w outputWriter) Write(p []byte) (int, error) {
	w.capture.Write(p)
	w.ring.AppendOutput(w.stream, p)
	w.appended(len(p))
	return len(p), nil
}

// appended follows an append of n bytes: they are counted, the screen
// state sees what it evicted, and the writer waits while held output
// fills the ring.
func (w outputWriter) appended(n int) {
	w.counts.outputBytes.Add(uint64(n))
	if w.screen != nil {
		w.screen.feed()
	}
	w.counts.waitRoom(w.ctx, w.ring)
}

// writer returns w, or for a durable execution a writer into whose ring
// memory the sandbox reads (sandbox.Reserver): a byte the kernel handed
// over is in the ring's file at once, whenever the supervisor dies.
func (e *execution) writer(w outputWriter) io.Writer {
	if e.dir == "" {
		return w
	}
	return &reservingWriter{outputWriter: w}
}

// reservingWriter is a sandbox.Reserver over a durable ring.
type reservingWriter struct {
	outputWriter
	buf      []byte // what the last Reserve lent
	lent     int    // how much of it Extend lent
	scratch  []byte // lent instead when the ring cannot lend (it is closed)
	fallback bool
}

var _ sandbox.Reserver = (*reservingWriter)(nil)

func (w *reservingWriter) Reserve(max int) {
	b, err := w.ring.Reserve(w.stream, max)
	w.fallback = err != nil
	if w.fallback {
		if cap(w.scratch) < max {
			w.scratch = make([]byte, max)
		}
		b = w.scratch[:max]
	}
	w.buf, w.lent = b, 0
}

func (w *reservingWriter) Extend(k int) []byte {
	w.lent += k
	if w.fallback {
		return w.buf[w.lent-k : w.lent]
	}
	p, err := w.ring.Extend(k)
	if err != nil {
		// The sandbox lends at most what it reserved: a broken copier.
		panic(fmt.Sprintf("session: %v", err))
	}
	return p
}

func (w *reservingWriter) Commit(n int) error {
	p := w.buf[:n]
	w.capture.Write(p)
	if w.fallback {
		if n > 0 {
			w.ring.AppendOutput(w.stream, p)
		}
	} else if _, err := w.ring.Commit(w.stream, n); err != nil {
		return err
	}
	w.appended(n)
	return nil
}

// Cancel stops a running execution; it ends as cancelled.
func (s *Supervisor) Cancel(owner, id string) error {
	e, err := s.lookup(owner, id)
	if err != nil {
		return err
	}
	return e.stop(StatusCancelled)
}

// Resize sets a PTY execution's terminal size, clamping rows and columns
// to 1..sandbox.MaxWindowSide. Resizes within ResizeCoalesce of the last
// one applied take effect together, as the last size, when that time is
// up; a size the terminal already has changes nothing.
func (s *Supervisor) Resize(owner, id string, rows, cols int) error {
	e, err := s.lookup(owner, id)
	if err != nil {
		return err
	}
	if e.spec.Policy.TTY == nil {
		return ErrNotPTY
	}
	proc, err := e.running()
	if err != nil {
		return err
	}
	return e.resize(proc, sandbox.ClampWindowSize(rows, cols))
}

// Signal sends a signal from the allowlist (INT, TERM, HUP, KILL, QUIT,
// USR1, USR2, WINCH, CONT, STOP; with or without "SIG") to the
// execution's process group.
func (s *Supervisor) Signal(owner, id, name string) error {
	sig, ok := signals[strings.TrimPrefix(strings.ToUpper(name), "SIG")]
	if !ok {
		return fmt.Errorf("%w: %q", ErrSignal, name)
	}
	e, err := s.lookup(owner, id)
	if err != nil {
		return err
	}
	proc, err := e.running()
	if err != nil {
		return err
	}
	if err := proc.Signal(sig); err != nil {
		return fmt.Errorf("%w: %w", ErrNotRunning, err)
	}
	e.ring.Append(replay.Event{Kind: replay.KindSignal, Signal: int(sig)})
	return nil
}

// Input writes p, which the client believes starts at input offset
// offset. Bytes already received are dropped, so a write retried after a
// reconnect is applied once; an offset beyond what was received is
// ErrInputOffset. It returns the input offset after the write.
func (s *Supervisor) Input(owner, id string, offset uint64, p []byte) (uint64, error) {
	e, err := s.lookup(owner, id)
	if err != nil {
		return 0, err
	}
	if _, err := e.running(); err != nil {
		return 0, err
	}
	received, err := e.in.write(offset, p)
	if err == nil {
		e.inputArrived()
	}
	s.counters.countInput(err)
	return received, err
}

// CloseStdin delivers end of file to a pipe execution's stdin once the
// queued input has been written.
func (s *Supervisor) CloseStdin(owner, id string) error {
	_, err := s.closeStdin(owner, id, nil)
	return err
}

// CloseStdinAfter is CloseStdin for a client that knows how much input it
// sent: it closes only when the execution has received exactly offset
// bytes, and otherwise fails with ErrInputOffset, so input lost on the way
// is resent before end of file, never after. It returns the input offset
// received, where such a client resends from.
func (s *Supervisor) CloseStdinAfter(owner, id string, offset uint64) (uint64, error) {
	return s.closeStdin(owner, id, &offset)
}

func (s *Supervisor) closeStdin(owner, id string, offset *uint64) (uint64, error) {
	e, err := s.lookup(owner, id)
	if err != nil {
		return 0, err
	}
	if e.spec.Policy.TTY != nil {
		return 0, ErrNoPipes
	}
	if _, err := e.running(); err != nil {
		return 0, err
	}
	received, first, err := e.in.closeStdin(offset)
	if err != nil {
		return received, err
	}
	if first {
		e.ring.Append(replay.Event{Kind: replay.KindStdinClosed})
	}
	return received, nil
}

// Wait is the long poll: it returns as soon as the execution has events
// after after, or has ended, or when timeout passes or ctx ends.
func (s *Supervisor) Wait(ctx context.Context, owner, id string, after uint64, timeout time.Duration) (Info, error) {
	e, err := s.lookup(owner, id)
	if err != nil {
		return Info{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := e.ring.Wait(ctx, after); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return Info{}, err
	}
	return e.info(), nil
}

// baseLogAttrs are the attributes of every lifecycle line of an execution:
// its ID, tenant and program (the program alone: arguments may hold
// secrets).
func baseLogAttrs(k key, spec Spec) []any {
	a := []any{"execution", k.id, "tenant", k.owner}
	if len(spec.Policy.Command) > 0 {
		a = append(a, "command", spec.Policy.Command[0])
	}
	return a
}
