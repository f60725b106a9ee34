package session_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	. "github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
	"golang.org/x/sys/unix"
)

// echoUntilEOF is a script of a kept process: it writes "ready\n", then
// echoes every input line, through whatever writers the current
// supervisor gave it, and exits 3 once the input holds "quit".
func echoUntilEOF(p *sessiontest.Proc) sandbox.Exit {
	p.Out().Stdout.Write([]byte("ready\n"))
	written := 0
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		in, _ := p.Input()
		if len(in) > written {
			p.Out().Stdout.Write([]byte("echo:" + in[written:]))
			written = len(in)
		}
		if strings.Contains(in, "quit") {
			return sandbox.Exit{Code: 3, Exact: true}
		}
		select {
		case why := <-p.Stopped():
			return sandbox.Exit{Code: -1, Stopped: why, Exact: true}
		case <-time.After(2 * time.Millisecond):
		}
	}
	return sandbox.Exit{Code: 99, Exact: true}
}

func newDurable(t *testing.T, l *sessiontest.Launcher, dir string) *Supervisor {
	t.Helper()
	s, err := New(Config{Launcher: l, StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// outputOf returns the output of every event after after, waiting until
// it holds want.
func outputOf(t *testing.T, s *Supervisor, id string, after uint64, want string) (string, uint64) {
	t.Helper()
	var got string
	last := after
	if !sandboxtest.Eventually(t, 5*time.Second, func() bool {
		sub, _, err := s.Attach("t", id, after)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		got = ""
		for {
			evs, _, err := sub.Next(ctx)
			for _, ev := range evs {
				if ev.Kind == replay.KindOutput {
					got += string(ev.Data)
				}
				last = ev.Seq
			}
			if err != nil || strings.Contains(got, want) {
				return strings.Contains(got, want)
			}
		}
	}) {
		t.Fatalf("output %q after %d, have %q", want, after, got)
	}
	return got, last
}

func TestDetachAndRestore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	l := &sessiontest.Launcher{Keep: true, Script: echoUntilEOF}
	a := newDurable(t, l, dir)
	info, err := a.Start(t.Context(), "t", "job", untimed("fake"))
	if err != nil {
		t.Fatal(err)
	}
	_, seen := outputOf(t, a, "job", 0, "ready\n")
	if _, err := a.Input("t", "job", 0, []byte("one\n")); err != nil {
		t.Fatal(err)
	}
	outputOf(t, a, "job", seen, "echo:one\n")
	if err := a.Detach(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Start(t.Context(), "t", "other", untimed("fake")); !errors.Is(err, ErrClosed) {
		t.Fatalf("start after detach: %v, want ErrClosed", err)
	}

	b := newDurable(t, l, dir)
	t.Cleanup(func() { b.Close(context.Background()) })
	n, err := b.Restore(t.Context())
	if err != nil || n.Running != 1 {
		t.Fatalf("restore: %+v, %v; want one running", n, err)
	}
	got, err := b.Get("t", "job")
	if err != nil || got.Incarnation != info.Incarnation || got.InputOffset != 4 || got.Status != StatusRunning {
		t.Fatalf("restored: %+v, %v; want running, incarnation %s, input offset 4", got, err, info.Incarnation)
	}
	// Everything from the start is still there, exactly once.
	all, _ := outputOf(t, b, "job", 0, "echo:one\n")
	if all != "ready\necho:one\n" {
		t.Fatalf("restored output %q", all)
	}
	// A retried input is dropped by offset; new input reaches the program.
	if _, err := b.Input("t", "job", 0, []byte("one\nquit\n")); err != nil {
		t.Fatal(err)
	}
	var res Info
	if !sandboxtest.Eventually(t, 5*time.Second, func() bool {
		res, err = b.Get("t", "job")
		return err == nil && res.Result != nil
	}) {
		t.Fatalf("the restored execution ends")
	}
	if res.Result.ExitCode != 3 {
		t.Fatalf("result %+v, want exit 3", res.Result)
	}
	all, _ = outputOf(t, b, "job", 0, "echo:quit\n")
	if all != "ready\necho:one\necho:quit\n" {
		t.Fatalf("output %q: the retried input was written twice, or lost", all)
	}

	// The result survives the next restart too, until its retention ends.
	if err := b.Detach(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := newDurable(t, l, dir)
	t.Cleanup(func() { c.Close(context.Background()) })
	if n, err := c.Restore(t.Context()); err != nil || n.Ended != 1 {
		t.Fatalf("restore: %+v, %v; want one ended", n, err)
	}
	if got, err := c.Get("t", "job"); err != nil || got.Result == nil || got.Result.ExitCode != 3 {
		t.Fatalf("after a second restart: %+v, %v", got, err)
	}
}

func TestRestoreLostAndGone(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	script := func(p *sessiontest.Proc) sandbox.Exit {
		if p.Policy.Command[0] == "brief" {
			return sandbox.Exit{Exact: true}
		}
		return sessiontest.UntilStopped(p)
	}
	la := &sessiontest.Launcher{Keep: true, Script: script}
	t.Cleanup(func() {
		for _, p := range la.Procs() {
			p.Stop(sandbox.StopCancel)
		}
	})
	a := newDurable(t, la, dir)
	if _, err := a.Start(t.Context(), "t", "running", untimed("fake")); err != nil {
		t.Fatal(err)
	}
	short := untimed("brief")
	short.Retention = 50 * time.Millisecond
	if _, err := a.Start(t.Context(), "t", "brief", short); err != nil {
		t.Fatal(err)
	}
	if !sandboxtest.Eventually(t, 5*time.Second, func() bool {
		info, err := a.Get("t", "brief")
		return err == nil && info.Result != nil
	}) {
		t.Fatal("brief did not end")
	}
	a.Detach(t.Context())
	time.Sleep(100 * time.Millisecond) // brief's retention ends while no supervisor runs

	// A launcher that kept nothing: the running one is lost, the ended one gone.
	b := newDurable(t, &sessiontest.Launcher{}, dir)
	t.Cleanup(func() { b.Close(context.Background()) })
	n, err := b.Restore(t.Context())
	if err != nil || n.Lost != 1 || n.Gone != 1 {
		t.Fatalf("restore: %+v, %v; want one lost, one gone", n, err)
	}
	got, err := b.Get("t", "running")
	if err != nil || got.Result == nil || got.Result.Status != StatusFailed || !strings.HasPrefix(got.Result.Reason, "lost") {
		t.Fatalf("lost execution: %+v, %v", got, err)
	}
	if _, err := b.Get("t", "brief"); !errors.Is(err, ErrGone) {
		t.Fatalf("ended and expired while no server ran: %v, want ErrGone", err)
	}
	if _, err := b.Get("t", "never"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown id: %v, want ErrNotFound", err)
	}
	if _, err := b.Get("other-tenant", "brief"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another tenant's tombstone: %v, want ErrNotFound", err)
	}
	// Starting the same ID again replaces the tombstone.
	if _, err := b.Start(t.Context(), "t", "brief", untimed("fake")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get("t", "brief"); err != nil {
		t.Fatalf("restarted id: %v", err)
	}
}

func TestStateDirChecked(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	// An empty one is made 0700 (a fresh volume); one holding anything,
	// which anyone could have put there, is refused.
	if err := os.WriteFile(filepath.Join(open, "ring"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Launcher: &sessiontest.Launcher{}, StateDir: open}); err == nil || !strings.Contains(err.Error(), "had mode 0755 and holds entries") {
		t.Fatalf("state dir of mode 0755 holding a file: %v, want an error naming its mode and entries", err)
	}
}

func TestCloseRemovesState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s := newDurable(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, dir)
	for i := range 3 {
		if _, err := s.Start(t.Context(), "t", fmt.Sprint("x", i), untimed("fake")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	left, err := os.ReadDir(filepath.Join(dir, "executions"))
	if err != nil || len(left) != 0 {
		t.Fatalf("after Close, the state directory holds %d entries (%v), want none", len(left), err)
	}
}

// TestScreenStateSurvivesDetach: a terminal whose early output was
// evicted still gets a snapshot after a planned restart; after a crash
// (no screen kept) a reader behind the ring gets a gap instead.
func TestScreenStateSurvivesDetach(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	ready := make(chan struct{})
	l := &sessiontest.Launcher{Keep: true, Script: func(p *sessiontest.Proc) sandbox.Exit {
		for i := range 200 {
			fmt.Fprintf(p.Out().Stdout, "line %d\r\n", i)
		}
		close(ready)
		return sessiontest.UntilStopped(p)
	}}
	t.Cleanup(func() {
		for _, p := range l.Procs() {
			p.Stop(sandbox.StopCancel)
		}
	})
	a := newDurable(t, l, dir)
	sp := untimed("fake")
	sp.Policy.TTY = &sandbox.WindowSize{Rows: 5, Cols: 20}
	sp.Ring = replay.Config{MaxEvents: 16}
	sp.Live = true // nobody reads: let the ring evict
	if _, err := a.Start(t.Context(), "t", "tty", sp); err != nil {
		t.Fatal(err)
	}
	<-ready
	if err := a.Detach(t.Context()); err != nil {
		t.Fatal(err)
	}
	snapshotAfterRestore := func() *Snapshot {
		b := newDurable(t, l, dir)
		defer b.Detach(t.Context())
		if _, err := b.Restore(t.Context()); err != nil {
			t.Fatal(err)
		}
		sub, _, err := b.Subscribe("t", "tty", AttachOptions{Snapshot: true})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		return sub.Snapshot()
	}
	snap := snapshotAfterRestore()
	if snap == nil || !strings.Contains(string(snap.Data), "line 183\r\n") {
		t.Fatalf("after a planned restart: snapshot %v, want one showing line 183", snap != nil)
	}
	os.Remove(filepath.Join(dir, "executions", filepath.Base(firstDir(t, dir)), "screen"))
	if snap := snapshotAfterRestore(); snap != nil {
		t.Fatalf("without a kept screen: a snapshot of %d bytes, want none (a gap)", len(snap.Data))
	}
}

// firstDir returns the one execution directory under dir.
func firstDir(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "executions"))
	if err != nil || len(ents) != 1 {
		t.Fatalf("executions: %v %v", ents, err)
	}
	return ents[0].Name()
}

// TestRestoreDropsUnreadableRecords: a record over the size bound,
// without a version, or not JSON is dropped with its directory, and the
// rest restores. (A newer version is refused: TestRestoreRefusesAnotherVersion.)
func TestRestoreDropsUnreadableRecords(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if _, err := New(Config{Launcher: &sessiontest.Launcher{}, StateDir: dir}); err != nil {
		t.Fatal(err)
	}
	// A record at the bound would restore (a tombstone: it has no ring);
	// one byte over it is dropped.
	padded := func(id string, size int) []byte {
		b := []byte(`{"version":1,"owner":"t","id":"` + id + `","gone":"` + time.Now().Format(time.RFC3339) + `","fingerprint":"`)
		b = append(b, bytes.Repeat([]byte("a"), size-len(b)-2)...)
		return append(b, `"}`...)
	}
	at := filepath.Join(dir, "executions", DirKey("t", "at-bound"))
	os.Mkdir(at, 0o700)
	os.WriteFile(filepath.Join(at, "record.json"), padded("at-bound", 1<<20), 0o600)
	bad := map[string][]byte{
		DirKey("t", "big"): padded("big", 1<<20+1),
		"xversion":         []byte(`{"version":0}`),
		"xgarbage":         []byte(`not json`),
	}
	for name, b := range bad {
		d := filepath.Join(dir, "executions", name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "record.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := newDurable(t, &sessiontest.Launcher{}, dir)
	defer s.Close(context.Background())
	if n, err := s.Restore(t.Context()); err != nil || n != (Restored{Gone: 1}) {
		t.Fatalf("restore: %+v, %v; want the record at the bound kept as a tombstone, nothing else", n, err)
	}
	if left, _ := os.ReadDir(filepath.Join(dir, "executions")); len(left) != 1 {
		t.Fatalf("left %d directories, want the unreadable ones dropped", len(left))
	}
	if _, err := s.Get("t", "at-bound"); !errors.Is(err, ErrGone) {
		t.Fatalf("the record at the bound: %v, want ErrGone", err)
	}
}

// TestRestoreLeavesAnUntypedInputFileAHole: an execution that never got
// input keeps its input file a hole, which takes no page of memory, and
// a restart does not read its header into one; its first input after
// the restart reaches the program.
func TestRestoreLeavesAnUntypedInputFileAHole(t *testing.T) {
	dir := filepath.Join(tmpfsDir(t), "state") // where reading a hole through a mapping gives it a page
	l := &sessiontest.Launcher{Keep: true, Script: echoUntilEOF}
	a := newDurable(t, l, dir)
	if _, err := a.Start(t.Context(), "t", "quiet", untimed("fake")); err != nil {
		t.Fatal(err)
	}
	outputOf(t, a, "quiet", 0, "ready\n")
	inputs, err := filepath.Glob(filepath.Join(dir, "*", "*", "input"))
	if err != nil || len(inputs) != 1 {
		t.Fatalf("input files %q, %v; want one", inputs, err)
	}
	if blocks := FileBlocks(t, inputs[0]); blocks != 0 {
		t.Fatalf("the input file of an execution without input holds %d blocks", blocks)
	}
	if err := a.Detach(t.Context()); err != nil {
		t.Fatal(err)
	}
	b := newDurable(t, l, dir)
	t.Cleanup(func() { b.Close(context.Background()) })
	if n, err := b.Restore(t.Context()); err != nil || n.Running != 1 {
		t.Fatalf("restore: %+v, %v; want one running", n, err)
	}
	if blocks := FileBlocks(t, inputs[0]); blocks != 0 {
		t.Errorf("after the restore the input file holds %d blocks", blocks)
	}
	if _, err := b.Input("t", "quiet", 0, []byte("one\n")); err != nil {
		t.Fatal(err)
	}
	outputOf(t, b, "quiet", 0, "echo:one\n")
	if blocks := FileBlocks(t, inputs[0]); blocks == 0 {
		t.Error("the input file holds no block after input")
	}
}

// tmpfsDir is a fresh directory on tmpfs (/dev/shm), where a state
// directory is best kept (serve's default, /run/termgate, is one on most
// hosts), removed when the test ends: a directory of ours, mode 0700, in
// a sticky parent, which the state directory's checks accept.
func tmpfsDir(t *testing.T) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		sandboxtest.Unavailable(t, "/dev/shm is not a tmpfs")
	}
	dir, err := os.MkdirTemp("/dev/shm", "termgate-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
