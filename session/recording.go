package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/termgate/termgate/replay"
	"golang.org/x/sys/unix"
)

// Recordings. With Config.RecordingsDir, an execution whose Spec.Record
// is set is written as an asciicast v2 file there: a header line (version
// 2, the terminal's width and height, the start as a Unix timestamp, TERM
// and SHELL), then one [time, code, data] line per event: "o" output, "i"
// input (Spec.RecordInput only: input can hold passwords), "r" a resize
// ("COLSxROWS"), "m" a marker for people. Times are seconds since the
// header's start, never decreasing.
//
// The recorder never slows the output path: it reads the execution's
// ring in its own goroutine, with a cursor of its own, and holds what it
// has not written (replay.Hold), so nothing is evicted before it has it;
// while it lags a full ring behind, the program waits, as for an
// acknowledging client (flow.go). That holds for a Live execution too: a
// recorded Live execution waits for its recorder (the disk), never for a
// client. Once an execution is stopped (cancel, timeout, shutdown) holds
// no longer keep anything: output evicted before the recorder read it is
// counted and said in a marker.
//
// Text: a UTF-8 character split between reads is held back until the
// rest arrives, so no event ends inside a character. Bytes that are not
// UTF-8 cannot travel in a JSON string: each becomes U+FFFD, and a final
// marker says how many did (Result.Recording.InvalidBytes); so does an
// incomplete character at the very end.
//
// Size: a recording holds at most Config.RecordingMaxSize bytes. The
// event that would pass the bound and everything after it are not
// recorded; a final marker says how many bytes of output and input were
// left out, and so does the result (Result.Recording).
//
// Files are created through an os.Root on the directory, mode 0600,
// named from the tenant (escaped, and past 32 bytes cut and followed by
// a hash of the whole tenant: castTenant), the execution ID and its
// incarnation, so nothing a client chose reaches the filesystem
// unescaped, two tenants never share a name, and a reused ID never
// overwrites an earlier recording. Files outlive their executions, within
// the budgets (bytes and files, per tenant and in all) and the retention
// of recording_budget.go: a start whose recording would pass a budget is
// refused, and a recording is deleted once its retention passed.
//
// A server restart (Detach, then Restore) does not end a recording: the
// detaching server writes what the ring holds, leaves its recorder's
// state in the execution's state directory (recorder.json: the sequence
// and file size it reached, what it held back, what it counted), and the
// next one goes on in the same file (O_APPEND; times stay relative to the
// header's start). A server that died (kill -9, a crash) leaves no such
// state: the recording of an execution it adopts is cut, with a marker
// saying so (Result.Recording.Cut).
// DefaultRecordingMaxSize is Config.RecordingMaxSize when zero.
const DefaultRecordingMaxSize = 64 << 20

// MinRecordingMaxSize is the smallest RecordingMaxSize: the header and
// the final markers must fit.
const MinRecordingMaxSize = 4 << 10

// markerReserve is the room kept under the size bound for the final
// markers, so the bound holds for the whole file.
const markerReserve = 512

// recordingDrainTimeout bounds how long an ending execution waits for its
// recorder to write the output that came before the exit, so the result
// can say what the recording lacks.
const recordingDrainTimeout = 10 * time.Second

// ErrNoRecording is returned by OpenRecording for an execution that is
// not recorded.
var ErrNoRecording = errors.New("session: execution has no recording")

// ErrRecordingOff is wrapped by the ErrInvalidSpec of a start that asks
// for a recording from a supervisor without Config.RecordingsDir.
var ErrRecordingOff = errors.New("recordings are off on this server")

// RecordingResult says what an ended execution's recording lacks.
type RecordingResult struct {
	// Truncated: the size bound stopped the recording; TruncatedBytes of
	// output and input came after it and are not in it.
	Truncated      bool  `json:"truncated"`
	TruncatedBytes int64 `json:"truncated_bytes"`
	// LostBytes of output were evicted before the recorder read them
	// (only after the execution was stopped).
	LostBytes int64 `json:"lost_bytes,omitempty"`
	// InvalidBytes were not UTF-8 and are recorded as U+FFFD.
	InvalidBytes int64 `json:"invalid_bytes,omitempty"`
	// Cut: the recording ended while the execution ran on, because the
	// server that recorded it died (a restart goes on with it).
	Cut bool `json:"cut,omitempty"`
}

// castDir is the recordings directory and what its files take
// (recording_budget.go).
type castDir struct {
	root   *os.Root
	max    int64
	budget castBudget
	log    *slog.Logger
	castDirSync
	castLedger
}

// openCastDir opens (making it if needed, mode 0700) the recordings
// directory of cfg; it counts nothing yet.
func openCastDir(cfg Config) (*castDir, error) {
	b := castBudget{maxBytes: cfg.RecordingsMaxBytes, ownerBytes: cfg.RecordingsMaxBytesPerOwner,
		maxFiles: cfg.RecordingsMaxFiles, ownerFiles: cfg.RecordingsMaxFilesPerOwner, retention: cfg.RecordingsRetention}
	switch max := cfg.RecordingMaxSize; {
	case max < MinRecordingMaxSize:
		return nil, fmt.Errorf("session: config: recording max size %d is below %d bytes", max, MinRecordingMaxSize)
	case b.ownerBytes < max || b.maxBytes < max:
		return nil, fmt.Errorf("session: config: recording budgets of %d bytes per owner and %d in all must hold a recording of the max size, %d bytes", b.ownerBytes, b.maxBytes, max)
	case b.ownerFiles < 1 || b.maxFiles < 1:
		return nil, fmt.Errorf("session: config: recording budgets of %d files per owner and %d in all must hold one", b.ownerFiles, b.maxFiles)
	}
	if err := os.MkdirAll(cfg.RecordingsDir, 0o700); err != nil {
		return nil, fmt.Errorf("session: recordings directory: %w", err)
	}
	root, err := os.OpenRoot(cfg.RecordingsDir)
	if err != nil {
		return nil, fmt.Errorf("session: recordings directory: %w", err)
	}
	d := &castDir{root: root, max: cfg.RecordingMaxSize, budget: b, log: cfg.Logger,
		castDirSync: castDirSync{stopSweep: make(chan struct{}), swept: make(chan struct{})},
		castLedger:  castLedger{writing: map[string]bool{}}}
	return d, nil
}

// checkRoom warns when the filesystem of the recordings directory has
// less room than the budget allows the recordings to take.
func (d *castDir) checkRoom(dir string) {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	d.mu.Lock() // the sweeper may be counting again
	taken := d.total.bytes
	d.mu.Unlock()
	if left := d.budget.maxBytes - taken; left > free {
		d.log.Warn("the recordings budget is more than the free space of the recordings directory's filesystem: recordings can fill it before their budget stops them",
			"recordings_max_bytes", d.budget.maxBytes, "recordings_bytes", taken, "free_bytes", free)
	}
}

// recorder writes one execution's recording. Its goroutine (run) reads
// the ring; input arrives from Supervisor.Input; mu orders both.
type recorder struct {
	ring   *replay.Ring
	hold   *replay.Hold
	input  bool // record input
	base   time.Time
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returned and the file is closed

	mu      sync.Mutex
	f       *os.File
	buf     []byte // lines not yet written
	size    int64  // bytes written to f: whole lines only
	max     int64
	last    float64                         // the newest event's time
	carry   [replay.StreamStderr + 1][]byte // an incomplete character per stream
	res     RecordingResult
	through uint64           // the newest sequence written
	moved   chan struct{}    // closed and replaced when through moves
	err     error            // the first write error: nothing more is written
	onClose func(size int64) // called once the file is closed, at its size
}

// startRecording creates e's recording and starts its recorder. Called
// from newExecution, before any output, for a spec that asks for one.
func (e *execution) startRecording() error {
	d := e.s.casts
	name := castName(e.key, e.incarnation)
	if err := d.reserve(name); err != nil {
		e.s.counters.refuse(RefusedRecordingBudget)
		return err
	}
	f, err := d.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		d.unreserve(name)
		return fmt.Errorf("session: create recording: %w", err)
	}
	r := &recorder{
		ring: e.ring, hold: e.ring.Hold(0), input: e.spec.RecordInput, base: e.started,
		done: make(chan struct{}), f: f, max: d.max, moved: make(chan struct{}),
		onClose: func(size int64) { d.closed(name, size) },
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	line, _ := json.Marshal(e.castHeader())
	r.buf = append(line, '\n')
	if err := r.flushLocked(); err != nil {
		f.Close()
		d.closed(name, r.size)
		d.remove(name, r.size)
		return err
	}
	e.rec, e.recName = r, name
	go r.run(e.s.log.With("execution", e.key.id, "tenant", e.key.owner), 0)
	return nil
}

// run writes the ring's events after sequence after until the exit
// event, or until the recorder is stopped.
func (r *recorder) run(log interface{ Error(string, ...any) }, after uint64) {
	defer close(r.done)
	defer r.hold.Release()
	cur := r.ring.Cursor(after)
	for {
		evs, gap, err := cur.Next(r.ctx)
		if err != nil {
			r.end(errors.Is(err, io.EOF))
			if r.err != nil {
				log.Error("recording incomplete", "err", r.err)
			}
			return
		}
		r.mu.Lock()
		if gap != nil {
			r.lostLocked(gap)
		}
		for i := range evs {
			r.eventLocked(&evs[i])
		}
		r.flushLocked()
		r.through = cur.After()
		close(r.moved)
		r.moved = make(chan struct{})
		r.mu.Unlock()
		r.hold.Ack(cur.After())
	}
}

// eventLocked records one event. Called with r.mu held.
func (r *recorder) eventLocked(ev *replay.Event) {
	switch ev.Kind {
	case replay.KindOutput:
		if text := r.textLocked(ev.Stream, ev.Data, false); len(text) > 0 {
			r.lineLocked(ev.Time, "o", text, len(ev.Data))
		}
	case replay.KindResize:
		r.lineLocked(ev.Time, "r", []byte(strconv.Itoa(int(ev.Cols))+"x"+strconv.Itoa(int(ev.Rows))), 0)
	}
}

// textLocked returns p after the stream's held-back bytes, holding back
// an incomplete character at its end unless final. The result is valid
// only until the next call. Called with r.mu held.
func (r *recorder) textLocked(s replay.Stream, p []byte, final bool) []byte {
	b := p
	if len(r.carry[s]) > 0 {
		b = append(r.carry[s], p...)
		r.carry[s] = nil
	}
	n := len(b)
	if !final {
		n = validPrefix(b)
	}
	if n < len(b) {
		r.carry[s] = append([]byte(nil), b[n:]...)
	}
	return b[:n]
}

// inputSlot is the carry slot of input, which no output stream uses.
const inputSlot = 0

// record records input accepted for the program, when input is recorded.
// Called by the input queue with its lock held, so input is recorded in
// the order it was accepted.
func (r *recorder) record(p []byte) {
	if !r.input {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return
	}
	if text := r.textLocked(inputSlot, p, false); len(text) > 0 {
		r.lineLocked(time.Now(), "i", text, len(p))
	}
	r.flushLocked()
}

// lostLocked records a gap: output evicted before the recorder read it.
// Called with r.mu held.
func (r *recorder) lostLocked(g *replay.Gap) {
	r.res.LostBytes += int64(g.Bytes)
	for s := replay.StreamPTY; s <= replay.StreamStderr; s++ {
		r.res.LostBytes += int64(len(r.carry[s])) // the rest of their character is gone
		r.carry[s] = nil
	}
	r.markLocked(time.Now(), fmt.Sprintf("%d bytes of output not recorded: evicted after the execution was stopped", g.Bytes))
}

// lineLocked appends an event line unless the size bound was reached;
// n is the output or input bytes it stands for. Called with r.mu held.
func (r *recorder) lineLocked(at time.Time, code string, data []byte, n int) {
	if r.res.Truncated {
		r.res.TruncatedBytes += int64(n)
		return
	}
	mark := len(r.buf)
	var invalid int64
	r.buf, invalid = r.appendLine(r.buf, at, code, data)
	if r.size+int64(len(r.buf)) > r.max-markerReserve {
		r.buf = r.buf[:mark]
		r.res.Truncated = true
		r.res.TruncatedBytes += int64(n)
		return
	}
	r.res.InvalidBytes += invalid
}

// markLocked appends a marker within the reserve kept for markers, when
// it fits. Called with r.mu held.
func (r *recorder) markLocked(at time.Time, text string) {
	mark := len(r.buf)
	r.buf, _ = r.appendLine(r.buf, at, "m", []byte(text))
	if r.size+int64(len(r.buf)) > r.max {
		r.buf = r.buf[:mark]
	}
}

// flushLocked writes the buffered lines in one write. Called with r.mu
// held.
func (r *recorder) flushLocked() error {
	if len(r.buf) == 0 || r.err != nil {
		r.buf = r.buf[:0]
		return r.err
	}
	n, err := r.f.Write(r.buf)
	r.size += int64(n)
	r.buf = r.buf[:0]
	if err != nil {
		r.err = fmt.Errorf("session: write recording: %w", err)
	}
	return r.err
}

// end finishes the recording: at the execution's end (final) it writes
// what was held back and the markers that say what the recording lacks;
// cut or abandoned, it only closes the file.
func (r *recorder) end(final bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if final {
		r.flushCarriesLocked()
		r.finalMarksLocked()
	}
	r.flushLocked()
	if err := r.f.Close(); err != nil && r.err == nil {
		r.err = fmt.Errorf("session: close recording: %w", err)
	}
	r.f = nil
	if r.onClose != nil {
		r.onClose(r.size)
	}
}

// flushCarriesLocked records what is held back of incomplete characters
// as it is (U+FFFD): nothing completes them any more. Called with r.mu
// held.
func (r *recorder) flushCarriesLocked() {
	for s := range r.carry {
		if n := len(r.carry[s]); n > 0 {
			code := "o"
			if s == inputSlot {
				code = "i"
			}
			r.lineLocked(time.Now(), code, r.textLocked(replay.Stream(s), nil, true), n)
		}
	}
}

// finalMarksLocked writes the markers of what the recording lacks.
// Called with r.mu held.
func (r *recorder) finalMarksLocked() {
	now := time.Now()
	if r.res.Truncated {
		r.markLocked(now, fmt.Sprintf("recording stopped at its size limit of %d bytes: %d bytes of output and input not recorded", r.max, r.res.TruncatedBytes))
	}
	if r.res.InvalidBytes > 0 {
		r.markLocked(now, fmt.Sprintf("%d bytes that were not UTF-8 are recorded as U+FFFD", r.res.InvalidBytes))
	}
}

// drain waits until the recorder has written every event up to seq, or
// recordingDrainTimeout passed, and returns what the recording lacks so
// far. With final, no more output comes: what is held back of an
// incomplete character is recorded as it is.
func (r *recorder) drain(seq uint64, final bool) RecordingResult {
	timeout := time.NewTimer(recordingDrainTimeout)
	defer timeout.Stop()
	for {
		r.mu.Lock()
		through, moved := r.through, r.moved
		if through >= seq {
			if final {
				r.flushCarriesLocked()
				r.flushLocked()
			}
			res := r.res
			r.mu.Unlock()
			return res
		}
		res := r.res
		r.mu.Unlock()
		select {
		case <-moved:
		case <-r.done:
			return r.result()
		case <-timeout.C:
			return res
		}
	}
}

// result returns what the recording lacks.
func (r *recorder) result() RecordingResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.res
}

// stop ends the recorder without final markers (the server detaches, or
// the execution never ran) and waits for it.
func (r *recorder) stop() {
	r.cancel()
	<-r.done
}

// recordingResult waits for e's recorder to write the output before the
// exit and says what the recording lacks; nil when e is not recorded.
func (e *execution) recordingResult() *RecordingResult {
	switch {
	case e.rec != nil:
		_, last := e.ring.Bounds()
		res := e.rec.drain(last, true)
		return &res
	case e.recCut:
		return &RecordingResult{Cut: true}
	}
	return nil
}

// waitRecorder waits for e's recorder, if any, to close its file.
func (e *execution) waitRecorder() {
	if e.rec != nil {
		<-e.rec.done
	}
}

// checkRecording refuses a spec that asks for a recording the supervisor
// cannot make.
func (s *Supervisor) checkRecording(spec Spec) error {
	switch {
	case spec.Record && s.casts == nil:
		return fmt.Errorf("%w: %w", ErrInvalidSpec, ErrRecordingOff)
	case spec.RecordInput && !spec.Record:
		return fmt.Errorf("%w: recording input needs a recording", ErrInvalidSpec)
	}
	return nil
}

// abandonRecording removes the recording of an execution that never ran.
func (e *execution) abandonRecording() {
	if e.rec == nil {
		return
	}
	e.rec.stop()
	e.s.casts.remove(e.recName, e.rec.size)
}

// OpenRecording opens the recording of owner's execution id for reading
// and returns its size: the complete lines written so far (a recording
// still being written grows after it). Another owner's execution is
// ErrNotFound, like an unknown one; one without a recording is
// ErrNoRecording. The caller closes the file.
func (s *Supervisor) OpenRecording(owner, id string) (*os.File, int64, error) {
	e, err := s.lookup(owner, id)
	if err != nil {
		return nil, 0, err
	}
	if e.recName == "" || s.casts == nil {
		return nil, 0, fmt.Errorf("%w: %s", ErrNoRecording, id)
	}
	var size int64 = -1
	if e.rec != nil {
		e.rec.mu.Lock()
		if e.rec.f != nil {
			size = e.rec.size
		}
		e.rec.mu.Unlock()
	}
	f, err := s.casts.root.Open(e.recName)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %s: %w", ErrNoRecording, id, err)
	}
	if size < 0 {
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, 0, fmt.Errorf("session: recording: %w", err)
		}
		size = st.Size()
	}
	return f, size, nil
}

// Recording reports whether the supervisor can record executions
// (Config.RecordingsDir is set).
func (s *Supervisor) Recording() bool { return s.casts != nil }

// closeCasts closes the recordings directory once no recorder writes.
func (s *Supervisor) closeCasts() {
	if s.casts != nil {
		s.casts.stopSweeping()
		s.casts.root.Close()
	}
}
