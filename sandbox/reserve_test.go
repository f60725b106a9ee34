//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// lendingWriter is an output writer that lends its memory to reads, as a
// ring in shared memory does. It checks the protocol: one reservation at a
// time, pieces within it, a commit of every piece read exactly (or of
// nothing when the only piece's read found nothing), and never a Write.
type lendingWriter struct {
	mu       sync.Mutex
	reserved []byte // the outstanding reservation; nil when none
	max      int    // its size as asked for
	lent     int    // the bytes of its pieces
	pieces   int
	got      bytes.Buffer
	events   []int // the size of each non-empty commit
	problems []string
}

func (w *lendingWriter) Reserve(max int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reserved != nil {
		w.problems = append(w.problems, "Reserve before the previous Commit")
	}
	if max <= 0 || max > maxReadBuf {
		w.problems = append(w.problems, fmt.Sprintf("Reserve(%d)", max))
	}
	w.reserved = bytes.Repeat([]byte{0xee}, max)
	w.max, w.lent, w.pieces = max, 0, 0
}

func (w *lendingWriter) Extend(k int) []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reserved == nil || k <= 0 || w.lent+k > w.max {
		w.problems = append(w.problems, fmt.Sprintf("Extend(%d) after %d of %d (reserved: %v)", k, w.lent, w.max, w.reserved != nil))
		return make([]byte, k)
	}
	w.lent += k
	w.pieces++
	return w.reserved[w.lent-k : w.lent]
}

func (w *lendingWriter) Commit(n int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.reserved == nil:
		w.problems = append(w.problems, "Commit without Reserve")
		return nil
	case n != w.lent && (n != 0 || w.pieces > 1):
		// A ring recovers a read under way only when it fills the whole piece.
		w.problems = append(w.problems, fmt.Sprintf("Commit(%d) of %d lent in %d pieces", n, w.lent, w.pieces))
		n = min(max(n, 0), w.lent)
	}
	w.got.Write(w.reserved[:n])
	if n > 0 {
		w.events = append(w.events, n)
	}
	w.reserved = nil
	return nil
}

func (w *lendingWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.problems = append(w.problems, fmt.Sprintf("Write of %d bytes instead of a reservation", len(b)))
	return len(b), nil
}

// String returns what was committed so far.
func (w *lendingWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.got.String()
}

// check reports protocol problems, and output other than want.
func (w *lendingWriter) check(t *testing.T, what, want string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.problems) > 0 {
		t.Errorf("%s: %d protocol problems, first: %s", what, len(w.problems), w.problems[0])
	}
	if w.reserved != nil {
		t.Errorf("%s: a reservation was never committed", what)
	}
	if got := w.got.String(); got != want {
		t.Errorf("%s: got %d bytes, want %d; first difference at %d", what, len(got), len(want), firstDiff(got, want))
	}
	for _, n := range w.events {
		if n > maxReadBuf {
			t.Errorf("%s: an event of %d bytes, more than a burst (%d)", what, n, maxReadBuf)
			break
		}
	}
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestLentMemory runs commands whose output goes to writers that lend
// their memory: every byte arrives exactly once, through reservations
// only, whether it comes in pieces or as a flood, from pipes or a PTY.
func TestLentMemory(t *testing.T) {
	t.Parallel()
	l := needLauncher(t)
	split := `for i in 1 2 3 4 5; do printf "part$i-"; sleep 0.05; done; echo end`
	for _, tc := range []struct {
		name           string
		script         string
		tty            bool
		stdout, stderr string
		burst          bool // the output comes in events larger than a terminal's reads
	}{
		{"pipes, split", split + "; printf err1 >&2; sleep 0.05; printf err2 >&2", false,
			"part1-part2-part3-part4-part5-end\n", "err1err2", false},
		{"pipes, large", "seq 1 300000; seq 1 20000 >&2", false, seqOutput(300000), seqOutput(20000), true},
		{"pty, split", "stty -opost; " + split, true, "part1-part2-part3-part4-part5-end\n", "", false},
		{"pty, large", "stty -opost; seq 1 300000", true, seqOutput(300000), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr lendingWriter
			p := Policy{Command: sh(tc.script), Workspace: sandboxtest.Dir(t)}
			if tc.tty {
				p.TTY = &WindowSize{Rows: 24, Cols: 80}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			proc, err := l.Start(ctx, p, Stdio{Stdout: &stdout, Stderr: &stderr})
			if err != nil {
				t.Fatal(err)
			}
			if exit := proc.Wait(); !exit.Success() {
				t.Errorf("exit: %s", exit)
			}
			stdout.check(t, "stdout", tc.stdout)
			stderr.check(t, "stderr", tc.stderr)
			if largest := maxOf(stdout.events); tc.burst && largest <= minReadBuf {
				t.Errorf("no burst: the largest event has %d bytes (%d events)", largest, len(stdout.events))
			}
		})
	}
}
