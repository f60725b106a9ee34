package session

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"time"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/session/internal/statedir"
)

// Recordings across a restart (see recording.go): the detaching server
// leaves its recorder's state, the next one goes on from it.

// restoreRecording names the recording of a restored execution; for one
// still running it goes on with the recording where the detached server
// left it, or cuts it when that server left no recorder state.
func (e *execution) restoreRecording(running bool) {
	if !e.spec.Record || e.s.casts == nil {
		return
	}
	e.recName = castName(e.key, e.incarnation)
	if legacy := legacyCastName(e.key, e.incarnation); legacy != e.recName {
		if _, err := e.s.casts.root.Lstat(e.recName); errors.Is(err, fs.ErrNotExist) {
			e.recName = legacy // begun by a server that named files so
		}
	}
	if running && !e.resumeRecording() {
		e.cutRecording()
	}
}

// recorderState is a recorder's state, which a detaching server leaves
// in the execution's state directory (statedir.SaveRecorder).
type recorderState struct {
	Through uint64                          `json:"through"` // the newest sequence written
	Size    int64                           `json:"size"`    // the file's size then
	Last    float64                         `json:"last"`    // the newest event's time
	Result  RecordingResult                 `json:"result"`
	Carry   [replay.StreamStderr + 1][]byte `json:"carry"` // held back of incomplete characters
}

// saveRecorder leaves the state of e's stopped recorder for the next
// server. Called by Detach for a running execution.
func (e *execution) saveRecorder() {
	r := e.rec
	r.mu.Lock()
	st := recorderState{Through: r.through, Size: r.size, Last: r.last, Result: r.res, Carry: r.carry}
	r.mu.Unlock()
	b, _ := json.Marshal(st)
	if err := statedir.SaveRecorder(e.dir, b); err != nil {
		e.s.log.Error("cannot keep the recorder's state: the next server cuts the recording", "execution", e.key.id, "tenant", e.key.owner, "err", err)
	}
}

// resumeRecording goes on with the recording of a restored execution
// from the state the detached server left, and reports whether it could.
// The state is used once: a server that dies later leaves none.
func (e *execution) resumeRecording() bool {
	b, err := statedir.TakeRecorder(e.dir)
	if err != nil {
		return false
	}
	var st recorderState
	if err := json.Unmarshal(b, &st); err != nil {
		e.s.log.Warn("unreadable recorder state: the recording is cut", "execution", e.key.id, "tenant", e.key.owner, "err", err)
		return false
	}
	f, err := e.s.casts.root.OpenFile(e.recName, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return false
	}
	if fi, err := f.Stat(); err != nil || fi.Size() < st.Size || f.Truncate(st.Size) != nil {
		f.Close() // not the file the state describes
		return false
	}
	r := &recorder{
		ring: e.ring, hold: e.ring.Hold(st.Through), input: e.spec.RecordInput, base: e.started,
		done: make(chan struct{}), f: f, max: e.s.casts.max, moved: make(chan struct{}),
		size: st.Size, last: st.Last, res: st.Result, carry: st.Carry, through: st.Through,
		onClose: func(size int64) { e.s.casts.closed(e.recName, size) },
	}
	e.s.casts.reopened(e.recName, st.Size)
	r.ctx, r.cancel = context.WithCancel(context.Background())
	e.rec = r
	e.in.onAccept = r.record
	go r.run(e.s.log.With("execution", e.key.id, "tenant", e.key.owner), st.Through)
	return true
}

// cutRecording ends the recording of a restored, still running
// execution with a marker saying it was cut: the server that recorded it
// died and left no recorder state.
func (e *execution) cutRecording() {
	f, err := e.s.casts.root.OpenFile(e.recName, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		e.s.log.Warn("recording of an adopted execution not found", "execution", e.key.id, "tenant", e.key.owner, "err", err)
		e.recName = ""
		return
	}
	defer f.Close()
	r := &recorder{base: e.started, max: e.s.casts.max, f: f, last: time.Since(e.started).Seconds()}
	if st, err := f.Stat(); err == nil {
		r.size = st.Size()
	}
	if !endsWithNewline(f, r.size) {
		r.buf = append(r.buf, '\n') // a line the killed server did not finish
	}
	r.markLocked(time.Now(), "recording cut: the server that recorded this died while the execution ran on")
	r.flushLocked()
	e.recCut = true
}

// endsWithNewline reports whether f (of size bytes) is empty or ends
// with a newline.
func endsWithNewline(f *os.File, size int64) bool {
	if size == 0 {
		return true
	}
	var b [1]byte
	_, err := f.ReadAt(b[:], size-1)
	return err != nil || b[0] == '\n'
}

// stopRecorder stops e's recorder without final markers, the server
// detaching, and leaves its state for the next server when e runs on
// (restoreRecording).
func (e *execution) stopRecorder() {
	if e.rec == nil {
		return
	}
	_, last := e.ring.Bounds()
	e.rec.drain(last, false) // output no longer moves: write what came
	e.rec.stop()
	if e.result() == nil && e.dir != "" {
		e.saveRecorder()
	}
}
