package session

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/termgate/termgate/replay"
)

// Figures for metrics. The supervisor keeps them as it goes, as atomics
// (the output path adds once per read burst, never per byte, and takes
// no lock of its own) or under its lock where it holds it anyway; Stats
// and Occupancy read them when scraped.

// StartLatencyBuckets are the upper bounds, in seconds, of the sandbox
// start latency histogram (Stats.StartLatency): from 5 ms (a fake or a
// warm launcher) to 2 s (a loaded machine's first bwrap), and beyond.
var StartLatencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2}

// Kinds of resume (Stats.Resumes): a subscription after a sequence the
// reader already had (AttachOptions.After > 0) continues from the
// retained history, from a snapshot of the screen standing in for evicted
// history, or after a gap.
const (
	ResumeHistory  = "history"
	ResumeSnapshot = "snapshot"
	ResumeGap      = "gap"
)

// ResumeKinds are the kinds of resume, in a stable order.
var ResumeKinds = []string{ResumeHistory, ResumeSnapshot, ResumeGap}

// Kinds of refusal the supervisor counts (Stats.Refused): the limit a
// start or an input ran into.
const (
	RefusedMaxRunning      = "max_running"      // Config.MaxRunning
	RefusedTenantRunning   = "tenant_running"   // Config.MaxRunningPerOwner
	RefusedRetained        = "retained"         // Config.MaxRetained, all running
	RefusedTenantRetained  = "tenant_retained"  // Config.MaxRetainedPerOwner, all running
	RefusedDescriptors     = "descriptors"      // out of file descriptors at start
	RefusedInputFull       = "input_full"       // Config.InputBuffer
	RefusedRecordingBudget = "recording_budget" // the recording budgets (recording_budget.go)
)

// RefusedKinds are the kinds of refusal, in a stable order.
var RefusedKinds = []string{RefusedMaxRunning, RefusedTenantRunning, RefusedRetained, RefusedTenantRetained,
	RefusedDescriptors, RefusedInputFull, RefusedRecordingBudget}

// TenantSeries bounds the tenants Stats.ByTenant names: the first
// TenantSeries owners to start an execution keep a name for the
// supervisor's lifetime (so their counters only grow); every later one
// counts under TenantOther.
const TenantSeries = 100

// TenantOther is the ByTenant entry of the owners beyond TenantSeries;
// no tenant has this name (tenants start with a letter or digit).
const TenantOther = "_other"

// EndKey is one kind of end: a final status and the exit event's reason
// ("exited", "failed", "lost", "cancelled", "timed_out", "timed_out:idle",
// "limit:memory", ...).
type EndKey struct {
	Status Status
	Reason string
}

// TenantStats are one tenant's executions.
type TenantStats struct {
	Running int    `json:"running"`
	Started uint64 `json:"started"`
}

// Histogram is a latency histogram: Counts[i] counts the samples at most
// StartLatencyBuckets[i] seconds (not cumulative), and the last entry
// those above every bound.
type Histogram struct {
	Counts []uint64
	Sum    time.Duration
}

// Count returns the samples.
func (h Histogram) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// counters are the supervisor's figures kept as atomics.
type counters struct {
	outputBytes, inputBytes atomic.Uint64
	flowWaiting             atomic.Int64 // output writers waiting for room now
	flowWaits               atomic.Uint64
	resumes                 [3]atomic.Uint64 // by ResumeKinds
	resumeGapBytes          atomic.Uint64
	refused                 [7]atomic.Uint64 // by RefusedKinds
	latency                 [10]atomic.Uint64
	latencySum              atomic.Int64 // nanoseconds
}

// refuse counts a refusal of a kind in RefusedKinds.
func (c *counters) refuse(kind string) {
	c.refused[slices.Index(RefusedKinds, kind)].Add(1)
}

// started counts a sandbox start that took d.
func (c *counters) started(d time.Duration) {
	i, _ := slices.BinarySearch(StartLatencyBuckets, d.Seconds())
	c.latency[i].Add(1)
	c.latencySum.Add(int64(d))
}

// waitRoom is ring.WaitRoom, counted while it waits: a program parked
// because a reader holds unacknowledged output.
func (c *counters) waitRoom(ctx context.Context, ring *replay.Ring) {
	if !ring.Full() {
		return
	}
	c.flowWaits.Add(1)
	c.flowWaiting.Add(1)
	defer c.flowWaiting.Add(-1)
	ring.WaitRoom(ctx)
}

// fill copies the counters into st.
func (c *counters) fill(st *Stats) {
	st.OutputBytes, st.InputBytes = c.outputBytes.Load(), c.inputBytes.Load()
	st.FlowWaiting, st.FlowWaits = int(c.flowWaiting.Load()), c.flowWaits.Load()
	st.Resumes = make(map[string]uint64, len(ResumeKinds))
	for i, k := range ResumeKinds {
		st.Resumes[k] = c.resumes[i].Load()
	}
	st.ResumeGapBytes = c.resumeGapBytes.Load()
	st.Refused = make(map[string]uint64, len(RefusedKinds))
	for i, k := range RefusedKinds {
		st.Refused[k] = c.refused[i].Load()
	}
	st.StartLatency = Histogram{Counts: make([]uint64, len(c.latency)), Sum: time.Duration(c.latencySum.Load())}
	for i := range c.latency {
		st.StartLatency.Counts[i] = c.latency[i].Load()
	}
}

// tenantLabelLocked returns the name owner counts under in ByTenant,
// giving it one of the TenantSeries names while some are left. Called
// with s.mu held.
func (s *Supervisor) tenantLabelLocked(owner string) string {
	if _, ok := s.startedBy[owner]; ok {
		return owner
	}
	if len(s.startedBy) < TenantSeries {
		s.startedBy[owner] = 0
		return owner
	}
	return TenantOther
}

// byTenantLocked returns the executions by tenant. Called with s.mu held.
func (s *Supervisor) byTenantLocked() map[string]TenantStats {
	out := make(map[string]TenantStats, len(s.startedBy)+1)
	for t, n := range s.startedBy {
		out[t] = TenantStats{Started: n}
	}
	out[TenantOther] = TenantStats{Started: s.startedOther}
	for owner, n := range s.byOwner {
		l := s.tenantLabelLocked(owner)
		ts := out[l]
		ts.Running += n
		out[l] = ts
	}
	return out
}

// countStartLocked counts a start of owner's by tenant. Called with s.mu
// held.
func (s *Supervisor) countStartLocked(owner string) {
	if l := s.tenantLabelLocked(owner); l == TenantOther {
		s.startedOther++
	} else {
		s.startedBy[l]++
	}
}

// Occupancy sums the output bytes the executions' rings hold (ringBytes)
// and, of those, the output a reader has not acknowledged yet (held).
// It holds the supervisor's lock only to list the executions.
func (s *Supervisor) Occupancy() (ringBytes, held uint64) {
	s.mu.Lock()
	es := make([]*execution, 0, len(s.execs))
	for _, e := range s.execs {
		es = append(es, e)
	}
	s.mu.Unlock()
	for _, e := range es {
		st := e.ring.Stats()
		ringBytes += uint64(st.Bytes)
		held += st.HeldBytes
	}
	return ringBytes, held
}

// countResume counts a subscription after a sequence the reader had, by
// what it continues from; a gap's bytes are counted with the first batch.
// after is the reader's, snapshot whether one stands in for history.
func (sub *Subscription) countResume(after uint64, snapshot bool) {
	if after == 0 {
		return
	}
	c := &sub.e.s.counters
	switch first, _ := sub.e.ring.Bounds(); {
	case snapshot:
		c.resumes[1].Add(1)
	case first > after+1:
		c.resumes[2].Add(1)
		sub.resumeGap = true
	default:
		c.resumes[0].Add(1)
	}
}

// countGap counts the bytes of the gap a resume starts with.
func (sub *Subscription) countGap(gap *replay.Gap) {
	if !sub.resumeGap {
		return
	}
	sub.resumeGap = false
	if gap != nil {
		sub.e.s.counters.resumeGapBytes.Add(gap.Bytes)
	}
}

// uncountStartLocked undoes countStartLocked for a start that never ran.
// Called with s.mu held.
func (s *Supervisor) uncountStartLocked(owner string) {
	if _, ok := s.startedBy[owner]; ok {
		s.startedBy[owner]--
	} else {
		s.startedOther--
	}
}

// countInput counts an input refused for a full buffer.
func (c *counters) countInput(err error) {
	if errors.Is(err, ErrInputFull) {
		c.refuse(RefusedInputFull)
	}
}
