package session

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/termgate/termgate/session/internal/statedir"
)

// Durable executions. With Config.StateDir, every execution keeps its
// state in a directory of its own: its ring and input mapped from files,
// its record, and at a planned restart its screen and recorder state.
// session/internal/statedir holds those files and lists them.
//
// A supervisor started on the same directory (Restore) takes over: live
// executions from the launcher (the sandbox's keeper holds them while no
// supervisor runs), ended ones with their results until their retention
// ends. What it cannot bring back is answered ErrGone, never ErrNotFound:
// a record is kept as a tombstone (record.json alone, under 4 KiB) for
// TombstoneRetention.

// TombstoneRetention is how long a restarted supervisor answers ErrGone
// for an execution it found ended or lost and could not serve.
const TombstoneRetention = 24 * time.Hour

// maxTombstones bounds the tombstones a supervisor keeps; the oldest go
// first.
const maxTombstones = 4096

// record is an execution's record.json.
type record = statedir.Record[Spec, Result]

// fingerprint identifies a normalized spec: a start of an ID that is
// known must bring the same one (ErrConflict).
type fingerprint = statedir.Fingerprint

// fingerprintOf is the fingerprint of a normalized spec.
func fingerprintOf(spec Spec) (fingerprint, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return fingerprint{}, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	return statedir.FingerprintOf(b), nil
}

// saveScreen writes e's screen state, if it has one worth keeping.
func (e *execution) saveScreen() {
	if e.dir == "" || e.screen == nil {
		return
	}
	first, _ := e.ring.Bounds()
	if first <= 1 {
		return // nothing evicted: a fresh emulator is exact
	}
	data, rows, cols, ok := e.screen.snapshot()
	if !ok {
		return // the next supervisor's readers behind the ring get a gap
	}
	if err := statedir.WriteScreen(e.dir, statedir.Screen{Seq: first - 1, Rows: rows, Cols: cols, Data: data}); err != nil {
		e.s.log.Warn("cannot keep the terminal's screen state", "execution", e.key.id, "err", err)
	}
}
