package session_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// TestStartStorageHoldsUpNoOtherStart: while one start is making its
// execution (its files in the state directory), another key's start, a
// Get and Stats go through. Making the execution under the supervisor's
// lock serialised every start's storage.
func TestStartStorageHoldsUpNoOtherStart(t *testing.T) {
	l := &sessiontest.Launcher{Script: sessiontest.UntilStopped}
	s := newDurable(t, l, filepath.Join(t.TempDir(), "state"))
	defer s.Close(context.Background())
	inSlow, release := make(chan struct{}), make(chan struct{})
	defer SetMakeHook(func(_, id string) {
		if id == "slow" {
			close(inSlow)
			<-release
		}
	})()
	slow := make(chan error, 1)
	go func() {
		_, err := s.Start(context.Background(), "t", "slow", untimed("fake"))
		slow <- err
	}()
	<-inSlow
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := s.Start(ctx, "t", "fast", untimed("fake"))
	close(release)
	if err != nil {
		t.Fatalf("a start while another made its storage: %v", err)
	}
	if err := <-slow; err != nil {
		t.Fatalf("the slow start: %v", err)
	}
	if st := s.Stats(); st.Running != 2 || st.StartedTotal != 2 {
		t.Fatalf("stats %+v, want 2 running, 2 started", st)
	}
}

// TestConcurrentIdempotentStarts: starts of one key with one spec at
// the same time launch one process and all answer it; a start with
// another spec meanwhile is a conflict.
func TestConcurrentIdempotentStarts(t *testing.T) {
	l := &sessiontest.Launcher{Script: sessiontest.UntilStopped}
	s := newDurable(t, l, filepath.Join(t.TempDir(), "state"))
	defer s.Close(context.Background())
	entered, release := make(chan struct{}), make(chan struct{})
	defer SetMakeHook(func(_, id string) {
		close(entered)
		<-release
	})()
	const n = 8
	var wg sync.WaitGroup
	infos := make([]Info, n)
	errs := make([]error, n)
	wg.Go(func() { infos[0], errs[0] = s.Start(t.Context(), "t", "once", untimed("fake")) })
	<-entered // the first start is making the execution: the others find it under way
	for i := 1; i < n; i++ {
		wg.Go(func() { infos[i], errs[i] = s.Start(t.Context(), "t", "once", untimed("fake")) })
	}
	_, conflict := s.Start(t.Context(), "t", "once", untimed("other"))
	close(release)
	wg.Wait()
	if !errors.Is(conflict, ErrConflict) {
		t.Fatalf("another spec while the first start is under way: %v, want ErrConflict", conflict)
	}
	for i := range n {
		if errs[i] != nil || infos[i].ID != "once" || infos[i].Started != infos[0].Started {
			t.Fatalf("start %d: %+v, %v; want the first start's execution", i, infos[i], errs[i])
		}
	}
	if got := len(l.Procs()); got != 1 {
		t.Fatalf("%d processes launched, want 1", got)
	}
	if st := s.Stats(); st.Running != 1 || st.StartedTotal != 1 {
		t.Fatalf("stats %+v, want 1 running, 1 started", st)
	}
	if _, err := s.Start(t.Context(), "t", "once", untimed("fake")); err != nil {
		t.Fatalf("a start once it is made: %v", err)
	}
}

// TestRestoreDropsATornFirstRecord: a start killed while it wrote its
// first record (written in place, before the launch) left a partial
// record and no process. Restore drops its directory, and the key starts
// afresh.
func TestRestoreDropsATornFirstRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	l := &sessiontest.Launcher{Script: sessiontest.UntilStopped}
	s := newDurable(t, l, dir)
	if _, err := s.Start(t.Context(), "t", "torn", untimed("fake")); err != nil {
		t.Fatal(err)
	}
	exec := filepath.Join(dir, "executions", DirKey("t", "torn"))
	names := dirNames(t, exec)
	if fmt.Sprint(names) != "[input record.json ring]" {
		t.Fatalf("a started execution's directory holds %v, want input, record.json and ring", names)
	}
	b, err := os.ReadFile(filepath.Join(exec, "record.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	// What a start killed while writing its record leaves: its files and
	// the first half of its record.
	if err := os.Mkdir(exec, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"ring": nil, "input": nil, "record.json": b[:len(b)/2]} {
		if err := os.WriteFile(filepath.Join(exec, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s2 := newDurable(t, l, dir)
	defer s2.Close(context.Background())
	if n, err := s2.Restore(t.Context()); err != nil || n != (Restored{}) {
		t.Fatalf("restore: %+v, %v; want the torn start dropped", n, err)
	}
	if _, err := os.Stat(exec); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the torn start's directory: %v, want it removed", err)
	}
	if info, err := s2.Start(t.Context(), "t", "torn", untimed("fake")); err != nil || info.Status != StatusRunning {
		t.Fatalf("starting the key again: %+v, %v", info, err)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// A record of another version is another termgate's: Restore refuses the
// directory and removes nothing, rather than taking it for a torn start.
func TestRestoreRefusesAnotherVersion(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	l := &sessiontest.Launcher{Keep: true, Script: sessiontest.UntilStopped}
	s := newDurable(t, l, dir)
	if _, err := s.Start(t.Context(), "t", "newer", untimed("fake")); err != nil {
		t.Fatal(err)
	}
	if err := s.Detach(t.Context()); err != nil {
		t.Fatal(err)
	}
	exec := filepath.Join(dir, "executions", DirKey("t", "newer"))
	rec := filepath.Join(exec, "record.json")
	b, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	newer := bytes.Replace(b, []byte(`"version":1`), []byte(`"version":2`), 1)
	if bytes.Equal(newer, b) {
		t.Fatalf("no version 1 in the record: %s", b)
	}
	if err := os.WriteFile(rec, newer, 0o600); err != nil {
		t.Fatal(err)
	}
	s2 := newDurable(t, l, dir)
	defer s2.Close(context.Background())
	if _, err := s2.Restore(t.Context()); !errors.Is(err, ErrStateVersion) {
		t.Fatalf("restore of a version 2 record: %v, want ErrStateVersion", err)
	}
	if got, err := os.ReadFile(rec); err != nil || !bytes.Equal(got, newer) {
		t.Fatalf("the version 2 record after the refusal: %q, %v; want it untouched", got, err)
	}
	// The termgate that wrote it (here: the record put back) takes over
	// the execution, still running.
	if err := os.WriteFile(rec, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s3 := newDurable(t, l, dir)
	defer s3.Close(context.Background())
	if n, err := s3.Restore(t.Context()); err != nil || n.Running != 1 {
		t.Fatalf("restore after the refusal: %+v, %v; want the execution adopted", n, err)
	}
}

// TestRecordKeepsTheSpecJSONAsFingerprint: a record's fingerprint is the
// spec's JSON, as records have always held it, so that a termgate of an
// earlier or a later kind reads it; and once restored, the execution
// still takes a start of its own spec as its own, and refuses another.
func TestRecordKeepsTheSpecJSONAsFingerprint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	l := &sessiontest.Launcher{Keep: true, Script: sessiontest.UntilStopped}
	s := newDurable(t, l, dir)
	if _, err := s.Start(t.Context(), "t", "fp", untimed("fake")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "executions", DirKey("t", "fp"), "record.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Fingerprint string          `json:"fingerprint"`
		Spec        json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Fingerprint != string(rec.Spec) {
		t.Fatalf("the record's fingerprint %q is not its spec's JSON %s", rec.Fingerprint, rec.Spec)
	}
	if err := s.Detach(t.Context()); err != nil {
		t.Fatal(err)
	}
	s2 := newDurable(t, l, dir)
	defer s2.Close(context.Background())
	if n, err := s2.Restore(t.Context()); err != nil || n.Running != 1 {
		t.Fatalf("restore: %+v, %v; want the execution adopted", n, err)
	}
	if _, err := s2.Start(t.Context(), "t", "fp", untimed("fake")); err != nil {
		t.Fatalf("a start of the restored execution's own spec: %v", err)
	}
	if _, err := s2.Start(t.Context(), "t", "fp", untimed("other")); !errors.Is(err, ErrConflict) {
		t.Fatalf("a start of another spec: %v, want ErrConflict", err)
	}
}
