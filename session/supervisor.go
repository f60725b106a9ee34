package session

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/termgate/termgate/sandbox/netpolicy"
	"github.com/termgate/termgate/session/execid"
	"github.com/termgate/termgate/session/internal/statedir"
)

// Defaults applied to a zero Config and to zero Spec fields.
const (
	DefaultTimeout             = 120 * time.Second
	DefaultRetention           = 15 * time.Minute
	DefaultOutputBudget        = 64 << 10
	DefaultMaxRunning          = 256
	DefaultMaxRunningPerOwner  = 64
	DefaultMaxRetained         = 1024
	DefaultMaxRetainedPerOwner = 128
	DefaultInputBuffer         = 64 << 10
	DefaultHold                = 5 * time.Minute
	DefaultScrollback          = 1000
	// DefaultMaxSnapshotBytes leaves 1 KiB of a 1 MiB message to the
	// snapshot message's other fields.
	DefaultMaxSnapshotBytes        = 1<<20 - 1<<10
	DefaultMaxScreenMemory         = 512 << 20
	DefaultMaxScreenMemoryPerOwner = 32 << 20
)

// Config configures a Supervisor. Zero fields take the defaults.
type Config struct {
	Launcher           Launcher // required
	MaxRunning         int      // running executions in total
	MaxRunningPerOwner int      // running executions of one owner
	MaxRetained        int      // executions kept, running or settled
	// MaxRetainedPerOwner bounds the executions one owner keeps, running
	// or settled, so one tenant cannot hold every retained slot (each
	// costs up to its ring's bytes plus its final output).
	MaxRetainedPerOwner int
	// DefaultTimeout is the absolute timeout of a batch execution
	// (DefaultTimeout); DefaultInteractiveTimeout that of an interactive
	// one (DefaultInteractiveTimeout), whose DefaultIdleTimeout is its
	// idle timeout (DefaultIdleTimeout). TimeoutWarning is how long before
	// a timeout fires its notice warns (DefaultTimeoutWarning; negative:
	// no warning). See timeout.go.
	DefaultTimeout            time.Duration
	DefaultInteractiveTimeout time.Duration
	DefaultIdleTimeout        time.Duration
	TimeoutWarning            time.Duration
	DefaultRetention          time.Duration
	DefaultOutputBudget       int
	InputBuffer               int // input bytes queued per execution before ErrInputFull
	// DefaultHold is Spec.Hold when zero (DefaultHold).
	DefaultHold time.Duration
	// Scrollback is the lines of history a terminal's screen state keeps
	// above the screen for snapshots (DefaultScrollback).
	Scrollback int
	// MaxSnapshotBytes bounds a screen snapshot's data as the text of a
	// JSON string, escapes included (DefaultMaxSnapshotBytes); it also
	// bounds the bytes of a terminal's scrollback. MaxScreenMemory and
	// MaxScreenMemoryPerOwner bound the memory terminal emulators reserve
	// (the most each can hold at its size), in total and per owner
	// (DefaultMaxScreenMemory, DefaultMaxScreenMemoryPerOwner); see
	// screen.go.
	MaxSnapshotBytes        int
	MaxScreenMemory         int
	MaxScreenMemoryPerOwner int
	// NoScreenState keeps no terminal state behind the rings: a terminal
	// whose history was evicted is followed with a gap, not a snapshot.
	NoScreenState bool
	// StateDir keeps every execution's state in files there (session/internal/statedir),
	// so that a supervisor started on it after this one was killed or
	// restarted takes over (Restore). Empty: executions live in memory
	// and end with the supervisor.
	StateDir string
	// RecordingsDir is where recordings are written (recording.go);
	// empty: no execution is recorded. RecordingMaxSize bounds each
	// (DefaultRecordingMaxSize, at least MinRecordingMaxSize).
	RecordingsDir    string
	RecordingMaxSize int64
	// RecordingsMaxBytes and RecordingsMaxFiles bound what the recordings
	// directory holds, RecordingsMaxBytesPerOwner and
	// RecordingsMaxFilesPerOwner what one owner's recordings hold; a
	// recording being written counts as RecordingMaxSize. A start past
	// one is refused with ErrRecordingBudget. RecordingsRetention is how
	// long a recording is kept after its last write; negative: until
	// removed by hand. Zero fields take the defaults
	// (DefaultRecordingsMaxBytes and so on; recording_budget.go).
	RecordingsMaxBytes         int64
	RecordingsMaxFiles         int
	RecordingsMaxBytesPerOwner int64
	RecordingsMaxFilesPerOwner int
	RecordingsRetention        time.Duration
	// Egress serves the proxies of executions with a network policy
	// (Spec.Network, network.go); nil: a spec that names one is refused.
	Egress *netpolicy.Egress
	Logger *slog.Logger
}

// Supervisor owns executions. It is safe for concurrent use.
type Supervisor struct {
	cfg    Config
	log    *slog.Logger
	ctx    context.Context // parent of every execution; cancelled by Close
	cancel context.CancelCauseFunc

	mu    sync.Mutex
	execs map[key]*execution
	// starting holds the starts admitted and still making their
	// execution (its storage, outside mu): a concurrent start of the same
	// key waits for it, and it counts against the limits already.
	starting map[key]*reservation
	running  int
	byOwner  map[string]int // running executions of each owner
	held     map[string]int // retained executions of each owner, running or settled
	started  uint64
	ended    map[EndKey]uint64
	// startedBy counts the starts of the first TenantSeries owners,
	// startedOther those of the rest (metrics.go).
	startedBy    map[string]uint64
	startedOther uint64
	counters     counters // metrics.go
	closed       bool
	wg           sync.WaitGroup // one per execution until its retention ends
	runs         sync.WaitGroup // one per execution's run, which releases the process after its record

	store    *statedir.Store   // nil without Config.StateDir
	gone     map[key]time.Time // tombstones: answered ErrGone (durable.go, restore.go)
	detached atomic.Bool       // Detach was called: nothing more is recorded
	// recording is held (read) by each execution finishing, and (write) by
	// Detach while it sets detached: a result is either recorded whole
	// before the detach, or left to the next supervisor.
	recording sync.RWMutex
	io        context.Context             // ends output's waits for room; ended by Detach or Close
	stopIO    context.CancelFunc          //
	onEnd     atomic.Pointer[func(Ended)] // OnEnd's hook (audithooks.go)
	casts     *castDir                    // nil without Config.RecordingsDir
	screens   *screenBudget               // terminal emulators' memory (screen.go)
}

type key struct{ owner, id string }

// New returns a supervisor. Close stops every execution.
func New(cfg Config) (*Supervisor, error) {
	if cfg.Launcher == nil {
		return nil, fmt.Errorf("session: config: a Launcher is required")
	}
	setDefault(&cfg.MaxRunning, DefaultMaxRunning)
	setDefault(&cfg.MaxRunningPerOwner, DefaultMaxRunningPerOwner)
	setDefault(&cfg.MaxRetained, DefaultMaxRetained)
	setDefault(&cfg.MaxRetainedPerOwner, DefaultMaxRetainedPerOwner)
	setDefault(&cfg.DefaultOutputBudget, DefaultOutputBudget)
	setDefault(&cfg.InputBuffer, DefaultInputBuffer)
	setDefault(&cfg.DefaultTimeout, DefaultTimeout)
	setDefault(&cfg.DefaultInteractiveTimeout, DefaultInteractiveTimeout)
	setDefault(&cfg.DefaultIdleTimeout, DefaultIdleTimeout)
	setDefault(&cfg.TimeoutWarning, DefaultTimeoutWarning)
	setDefault(&cfg.DefaultRetention, DefaultRetention)
	setDefault(&cfg.DefaultHold, DefaultHold)
	setDefault(&cfg.Scrollback, DefaultScrollback)
	setDefault(&cfg.RecordingMaxSize, DefaultRecordingMaxSize)
	setDefault(&cfg.RecordingsMaxBytes, DefaultRecordingsMaxBytes)
	setDefault(&cfg.RecordingsMaxBytesPerOwner, DefaultRecordingsMaxBytesPerOwner)
	setDefault(&cfg.RecordingsMaxFiles, DefaultRecordingsMaxFiles)
	setDefault(&cfg.RecordingsMaxFilesPerOwner, DefaultRecordingsMaxFilesPerOwner)
	setDefault(&cfg.RecordingsRetention, DefaultRecordingsRetention)
	setDefault(&cfg.MaxSnapshotBytes, DefaultMaxSnapshotBytes)
	setDefault(&cfg.MaxScreenMemory, DefaultMaxScreenMemory)
	setDefault(&cfg.MaxScreenMemoryPerOwner, DefaultMaxScreenMemoryPerOwner)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &Supervisor{
		cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel,
		execs: map[key]*execution{}, starting: map[key]*reservation{}, byOwner: map[string]int{}, held: map[string]int{}, ended: map[EndKey]uint64{},
		startedBy: map[string]uint64{},
		gone:      map[key]time.Time{},
		screens:   newScreenBudget(cfg.MaxScreenMemory, cfg.MaxScreenMemoryPerOwner),
	}
	s.io, s.stopIO = context.WithCancel(ctx)
	if cfg.RecordingsDir != "" {
		var err error
		if s.casts, err = openCastDir(cfg); err != nil {
			return nil, err
		}
		if cfg.StateDir == "" {
			s.casts.startSweeping()
		} else {
			s.casts.scan(false) // and sweep once Restore adopted what is being written
		}
		s.casts.checkRoom(cfg.RecordingsDir)
	}
	if cfg.StateDir != "" {
		var err error
		if s.store, err = statedir.Open(cfg.StateDir); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// Start starts the execution id of owner, or returns the existing one when
// owner already started id with an equal spec (ErrConflict when the spec
// differs). An empty id is generated. A start the sandbox refuses as
// invalid returns the error; one that fails otherwise is kept as a failed
// execution, so a retry sees the same outcome.
func (s *Supervisor) Start(ctx context.Context, owner, id string, spec Spec) (Info, error) {
	if id == "" {
		id = execid.New()
	}
	if err := checkID(id); err != nil {
		return Info{}, err
	}
	if err := s.checkRecording(spec); err != nil {
		return Info{}, err
	}
	if err := s.checkNetwork(spec); err != nil {
		return Info{}, err
	}
	spec, err := s.normalize(spec)
	if err != nil {
		return Info{}, err
	}
	fp, err := fingerprintOf(spec)
	if err != nil {
		return Info{}, err
	}
	s.mu.Lock()
	r, created, err := s.admit(key{owner, id}, fp)
	s.mu.Unlock()
	if err != nil {
		return Info{}, err
	}
	if created {
		e, err := s.makeExecution(r, key{owner, id}, spec, fp)
		if err != nil {
			return Info{}, err
		}
		e.logAttrs = slices.Clip(append(e.logAttrs, logAttrs(ctx)...))
		e.startAttrs = startAttrsOf(ctx)
		return s.launch(e)
	}
	e, err := r.wait(ctx)
	if err != nil {
		return Info{}, err
	}
	select {
	case <-e.launched:
		if err := e.launchErr; err != nil {
			return Info{}, err // the concurrent first start was refused
		}
		return e.info(), nil
	case <-ctx.Done():
		return Info{}, context.Cause(ctx)
	}
}

// makeHook, when set (by tests), runs as each new execution starts being
// made, outside s.mu.
var makeHook func(owner, id string)

// reservation is a start admitted whose execution is being made. Its
// execution, or the error that made none, is set before made closes.
type reservation struct {
	fingerprint fingerprint
	made        chan struct{}
	e           *execution
	err         error
}

// wait returns r's execution once it is made, or ctx's cause.
func (r *reservation) wait(ctx context.Context) (*execution, error) {
	select {
	case <-r.made:
		return r.e, r.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// makeExecution makes the execution r reserved, its files included, outside s.mu,
// so that one start's storage does not hold up every other start, and
// registers it; or, when that failed or s closed meanwhile, gives the
// reservation's counts back.
func (s *Supervisor) makeExecution(r *reservation, k key, spec Spec, fingerprint fingerprint) (*execution, error) {
	if makeHook != nil {
		makeHook(k.owner, k.id)
	}
	e, err := newExecution(s, k, spec, fingerprint, nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.starting, k)
	if err == nil && s.closed {
		if e.dir != "" {
			os.RemoveAll(e.dir)
		}
		e.unpin()
		e.abandonRecording()
		err = ErrClosed
	}
	if err != nil {
		s.unreserveLocked(k.owner)
		r.err = err
		close(r.made)
		return nil, err
	}
	delete(s.gone, k)
	s.execs[k] = e
	s.wg.Add(1)
	r.e = e
	close(r.made)
	return e, nil
}

// normalize fills spec defaults and validates what the supervisor owns.
func (s *Supervisor) normalize(spec Spec) (Spec, error) {
	if spec.Policy.Timeout != 0 {
		return spec, fmt.Errorf("%w: set Spec.Timeout, not Policy.Timeout", ErrInvalidSpec)
	}
	if err := s.normalizeTimeouts(&spec); err != nil {
		return spec, err
	}
	if spec.Retention <= 0 {
		spec.Retention = s.cfg.DefaultRetention
	}
	if spec.OutputBudget <= 0 {
		spec.OutputBudget = s.cfg.DefaultOutputBudget
	}
	if spec.Hold <= 0 {
		spec.Hold = s.cfg.DefaultHold
	}
	if spec.OutputBudget < 16 {
		return spec, fmt.Errorf("%w: output budget %d is below 16 bytes", ErrInvalidSpec, spec.OutputBudget)
	}
	if err := s.normalizeNetwork(&spec); err != nil {
		return spec, err
	}
	spec.Policy = spec.Policy.Normalize()
	if err := spec.Policy.Validate(); err != nil {
		return spec, err
	}
	return spec, nil
}

// admit returns the existing execution for k, as a reservation already
// made, or the start of k under way; or it reserves k and its place in
// the limits for a new execution that the caller must make (makeExecution)
// and launch (created). Called with s.mu held.
func (s *Supervisor) admit(k key, fingerprint fingerprint) (r *reservation, created bool, err error) {
	if s.closed {
		return nil, false, ErrClosed
	}
	if e, ok := s.execs[k]; ok {
		if e.fingerprint != fingerprint {
			return nil, false, fmt.Errorf("%w: %s", ErrConflict, k.id)
		}
		r := &reservation{fingerprint: fingerprint, made: make(chan struct{}), e: e}
		close(r.made)
		return r, false, nil
	}
	if r, ok := s.starting[k]; ok {
		if r.fingerprint != fingerprint {
			return nil, false, fmt.Errorf("%w: %s", ErrConflict, k.id)
		}
		return r, false, nil
	}
	if s.running >= s.cfg.MaxRunning {
		s.counters.refuse(RefusedMaxRunning)
		return nil, false, fmt.Errorf("%w: %d executions running, the maximum", ErrCapacity, s.running)
	}
	if s.byOwner[k.owner] >= s.cfg.MaxRunningPerOwner {
		s.counters.refuse(RefusedTenantRunning)
		return nil, false, fmt.Errorf("%w: %d executions of this owner running, the maximum", ErrCapacity, s.byOwner[k.owner])
	}
	if s.held[k.owner] >= s.cfg.MaxRetainedPerOwner && !s.evictOwnOldestSettled(k.owner) {
		s.counters.refuse(RefusedTenantRetained)
		return nil, false, fmt.Errorf("%w: %d executions retained for this owner and all running", ErrCapacity, s.held[k.owner])
	}
	if retained := len(s.execs) + len(s.starting); retained >= s.cfg.MaxRetained && !s.evictOldestSettled(k.owner) {
		s.counters.refuse(RefusedRetained)
		return nil, false, fmt.Errorf("%w: %d executions retained and all running", ErrCapacity, retained)
	}
	r = &reservation{fingerprint: fingerprint, made: make(chan struct{})}
	s.starting[k] = r
	s.held[k.owner]++
	s.running++
	s.byOwner[k.owner]++
	s.started++
	s.countStartLocked(k.owner)
	return r, true, nil
}

// unreserveLocked gives back the counts admit took for a start of owner
// that made no execution. Called with s.mu held.
func (s *Supervisor) unreserveLocked(owner string) {
	if s.held[owner]--; s.held[owner] <= 0 {
		delete(s.held, owner)
	}
	s.unstartLocked(owner)
}

// unstartLocked gives back the running and started counts admit took for
// a start of owner that never ran. Called with s.mu held.
func (s *Supervisor) unstartLocked(owner string) {
	s.running--
	s.started--
	s.uncountStartLocked(owner)
	if s.byOwner[owner]--; s.byOwner[owner] == 0 {
		delete(s.byOwner, owner)
	}
}

// evictOldestSettled makes room for owner: it removes owner's own oldest
// settled execution, or else the oldest settled one of an owner that holds
// more executions than owner does, so one tenant's churn cannot erase
// another's results. Called with s.mu held.
func (s *Supervisor) evictOldestSettled(owner string) bool {
	var oldest *execution
	for k, e := range s.execs {
		if k.owner != owner && s.held[k.owner] <= s.held[owner] {
			continue
		}
		if e.result() != nil && (oldest == nil || evictFirst(owner, e, oldest)) {
			oldest = e
		}
	}
	if oldest == nil {
		return false
	}
	s.removeLocked(oldest)
	return true
}

// evictOwnOldestSettled makes room within owner's own share
// (MaxRetainedPerOwner): it removes owner's oldest settled execution.
// Called with s.mu held.
func (s *Supervisor) evictOwnOldestSettled(owner string) bool {
	var oldest *execution
	for k, e := range s.execs {
		if k.owner == owner && e.result() != nil && (oldest == nil || evictFirst(owner, e, oldest)) {
			oldest = e
		}
	}
	if oldest == nil {
		return false
	}
	s.removeLocked(oldest)
	return true
}

// evictFirst reports whether a should be evicted before b, both settled:
// owner's own executions first, then the one that ended first.
func evictFirst(owner string, a, b *execution) bool {
	aOwn, bOwn := a.key.owner == owner, b.key.owner == owner
	if aOwn != bOwn {
		return aOwn
	}
	return a.result().Ended.Before(b.result().Ended)
}

// removeLocked forgets e. Called with s.mu held.
func (s *Supervisor) removeLocked(e *execution) {
	if s.execs[e.key] != e {
		return
	}
	delete(s.execs, e.key)
	if e.screen != nil {
		e.screen.drop()
	}
	if e.dir != "" && !s.detached.Load() {
		os.RemoveAll(e.dir)
	}
	if s.held[e.key.owner]--; s.held[e.key.owner] <= 0 {
		delete(s.held, e.key.owner)
	}
	e.stopRetention()
	s.wg.Done()
}

// settled moves e from running to settled. Called by exited.
func (s *Supervisor) settled(e *execution, status Status, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
	if s.byOwner[e.key.owner]--; s.byOwner[e.key.owner] == 0 {
		delete(s.byOwner, e.key.owner)
	}
	s.ended[EndKey{status, reason}]++
}

// forget undoes admit for an execution that never ran.
func (s *Supervisor) forget(e *execution) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeLocked(e)
	s.unstartLocked(e.key.owner)
}

// lookup returns owner's execution id. Another owner's ID is not found,
// exactly like an unknown one.
func (s *Supervisor) lookup(owner, id string) (*execution, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.execs[key{owner, id}]; ok {
		return e, nil
	}
	if s.goneLocked(key{owner, id}) {
		return nil, fmt.Errorf("%w: %s", ErrGone, id)
	}
	return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
}

// Get returns the state of an execution, with its result once ended.
func (s *Supervisor) Get(owner, id string) (Info, error) {
	e, err := s.lookup(owner, id)
	if err != nil {
		return Info{}, err
	}
	return e.info(), nil
}

// List returns owner's executions, oldest first.
func (s *Supervisor) List(owner string) []Info {
	s.mu.Lock()
	var es []*execution
	for k, e := range s.execs {
		if k.owner == owner {
			es = append(es, e)
		}
	}
	s.mu.Unlock()
	out := make([]Info, 0, len(es))
	for _, e := range es {
		out = append(out, e.info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out
}

// Stats counts the supervisor's executions.
func (s *Supervisor) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	by := make(map[Status]uint64, len(s.ended))
	ended := make(map[EndKey]uint64, len(s.ended))
	for k, v := range s.ended {
		by[k.Status] += v
		ended[k] = v
	}
	st := Stats{Running: s.running, Retained: len(s.execs) - s.running, StartedTotal: s.started, ByStatus: by,
		Ended: ended, ByTenant: s.byTenantLocked()}
	s.counters.fill(&st)
	return st
}

// Close stops every running execution (they end as cancelled), waits for
// them to end or for ctx, and drops all results. Start then fails with
// ErrClosed.
func (s *Supervisor) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	es := make([]*execution, 0, len(s.execs))
	for _, e := range s.execs {
		es = append(es, e)
	}
	s.mu.Unlock()
	for _, e := range es {
		e.stop(StatusCancelled)
	}
	s.cancel(ErrClosed)
	s.stopIO()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, e := range es {
			<-e.done
			e.waitRecorder()
			s.mu.Lock()
			s.removeLocked(e)
			s.mu.Unlock()
		}
		s.wg.Wait()
		s.runs.Wait() // each Release sent: a keeper keeps no exit for a next server
		s.closeCasts()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Config returns the configuration s runs with, defaults applied.
func (s *Supervisor) Config() Config { return s.cfg }
