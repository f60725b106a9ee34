package session_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	. "github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// castEvent is one event line of an asciicast v2 file.
type castEvent struct {
	Time float64
	Code string
	Data string
}

// readCast parses an asciicast v2 file strictly: a header of version 2,
// then [time, code, data] lines with times that never decrease.
func readCast(t *testing.T, path string) (map[string]any, []castEvent) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() {
		t.Fatalf("%s: no header", path)
	}
	var header map[string]any
	if err := json.Unmarshal(sc.Bytes(), &header); err != nil || header["version"] != 2.0 {
		t.Fatalf("header %q: %v", sc.Text(), err)
	}
	var evs []castEvent
	last := 0.0
	for sc.Scan() {
		var raw []any
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil || len(raw) != 3 {
			t.Fatalf("event line %q: %v", sc.Text(), err)
		}
		ev := castEvent{Time: raw[0].(float64), Code: raw[1].(string), Data: raw[2].(string)}
		if ev.Time < last {
			t.Fatalf("time goes back: %v after %v", ev.Time, last)
		}
		last = ev.Time
		evs = append(evs, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return header, evs
}

// joined returns the data of the events with code, concatenated.
func joined(evs []castEvent, code string) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Code == code {
			b.WriteString(ev.Data)
		}
	}
	return b.String()
}

// onlyCast returns the one recording in dir.
func onlyCast(t *testing.T, dir string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.cast"))
	if err != nil || len(m) != 1 {
		t.Fatalf("recordings in %s: %v, %v", dir, m, err)
	}
	return m[0]
}

// recorded is spec asking for a recording, with a terminal.
func recorded(input bool, cmd ...string) Spec {
	sp := untimed(cmd...)
	sp.Policy.TTY = &sandbox.WindowSize{Rows: 24, Cols: 80}
	sp.Policy.Env = map[string]string{"TERM": "xterm-256color"}
	sp.Record, sp.RecordInput = true, input
	return sp
}

// finished waits for the execution's result, then closes s so every
// recording is complete.
func finished(t *testing.T, s *Supervisor, id string) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for {
		info, err := s.Wait(ctx, "t", id, 1<<62, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if info.Result != nil {
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			return info.Result
		}
	}
}

func writes(parts ...string) func(p *sessiontest.Proc) sandbox.Exit {
	return func(p *sessiontest.Proc) sandbox.Exit {
		for _, s := range parts {
			p.Out().Stdout.Write([]byte(s))
		}
		return sandbox.Exit{Code: 0, Exact: true}
	}
}

func TestRecordingKeepsCharactersWhole(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// "€" split across two writes, then an invalid byte, then a character
	// cut off by the end.
	l := &sessiontest.Launcher{Script: writes("a\xe2\x82", "\xac b", "\xff c", "\xe2\x82")}
	s := newFake(t, l, Config{RecordingsDir: dir})
	if _, err := s.Start(t.Context(), "t", "utf8", recorded(false, "fake")); err != nil {
		t.Fatal(err)
	}
	res := finished(t, s, "utf8")
	header, evs := readCast(t, onlyCast(t, dir))
	if header["width"] != 80.0 || header["height"] != 24.0 || header["env"].(map[string]any)["TERM"] != "xterm-256color" {
		t.Errorf("header %v", header)
	}
	if got, want := joined(evs, "o"), "a€ b\uFFFD c\uFFFD\uFFFD"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
	for _, ev := range evs {
		if ev.Code == "o" && strings.HasPrefix(ev.Data, "\uFFFD") && strings.Contains(ev.Data, "b") {
			t.Errorf("split character became %q", ev.Data)
		}
	}
	if res.Recording == nil || res.Recording.InvalidBytes != 3 || res.Recording.Truncated {
		t.Errorf("result's recording: %+v", res.Recording)
	}
	if m := joined(evs, "m"); !strings.Contains(m, "3 bytes that were not UTF-8") {
		t.Errorf("markers %q", m)
	}
}

func TestRecordingInputOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	for _, input := range []bool{false, true} {
		dir := t.TempDir()
		l := &sessiontest.Launcher{Script: echoUntilEOF}
		s := newFake(t, l, Config{RecordingsDir: dir})
		if _, err := s.Start(t.Context(), "t", "in", recorded(input, "fake")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Input("t", "in", 0, []byte("hunter2\n")); err != nil {
			t.Fatal(err)
		}
		if err := s.Resize("t", "in", 30, 100); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Input("t", "in", 8, []byte("quit\n")); err != nil {
			t.Fatal(err)
		}
		finished(t, s, "in")
		_, evs := readCast(t, onlyCast(t, dir))
		want := ""
		if input {
			want = "hunter2\nquit\n"
		}
		if got := joined(evs, "i"); got != want {
			t.Errorf("input %v: recorded %q, want %q", input, got, want)
		}
		if got := joined(evs, "r"); got != "100x30" {
			t.Errorf("resizes %q", got)
		}
		if !strings.Contains(joined(evs, "o"), "echo:hunter2") {
			t.Errorf("output %q", joined(evs, "o"))
		}
	}
}

func TestRecordingBoundedInSize(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var parts []string
	for range 200 {
		parts = append(parts, strings.Repeat("x", 99)+"\n")
	}
	l := &sessiontest.Launcher{Script: writes(parts...)}
	s := newFake(t, l, Config{RecordingsDir: dir, RecordingMaxSize: MinRecordingMaxSize})
	if _, err := s.Start(t.Context(), "t", "big", recorded(false, "fake")); err != nil {
		t.Fatal(err)
	}
	res := finished(t, s, "big")
	path := onlyCast(t, dir)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > MinRecordingMaxSize {
		t.Errorf("recording of %d bytes, bound %d", st.Size(), MinRecordingMaxSize)
	}
	_, evs := readCast(t, path)
	got := int64(len(joined(evs, "o")))
	r := res.Recording
	if r == nil || !r.Truncated || got+r.TruncatedBytes != 200*100 {
		t.Fatalf("recorded %d bytes, result %+v: want them to add up to 20000", got, r)
	}
	last := evs[len(evs)-1]
	if last.Code != "m" || !strings.Contains(last.Data, "size limit") || !strings.Contains(last.Data, " "+strconv.FormatInt(r.TruncatedBytes, 10)+" bytes") {
		t.Errorf("last event %+v", last)
	}
}

func TestRecordingFileSafeAndPrivate(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "casts")
	s := newFake(t, &sessiontest.Launcher{}, Config{RecordingsDir: dir})
	sp := recorded(false, "fake")
	if _, err := s.Start(t.Context(), "../../etc/x y", "a..b", sp); err != nil {
		t.Fatal(err)
	}
	f, _, err := s.OpenRecording("../../etc/x y", "a..b")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, _, err := s.OpenRecording("other", "a..b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another tenant's recording: %v", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 1 {
		t.Fatalf("%v, %v", ents, err)
	}
	name := ents[0].Name()
	if !strings.HasPrefix(name, "%2E%2E%2F%2E%2E%2Fetc%2Fx%20y_a..b_") || strings.Contains(name, "/") {
		t.Errorf("file name %q", name)
	}
	st, err := os.Stat(filepath.Join(dir, name))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, %v", st.Mode(), err)
	}
	// Not recorded: no recording to open.
	if _, err := s.Start(t.Context(), "t", "plain", untimed("fake")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.OpenRecording("t", "plain"); !errors.Is(err, ErrNoRecording) {
		t.Errorf("unrecorded execution: %v", err)
	}
}

func TestRecordingNeedsADirectory(t *testing.T) {
	t.Parallel()
	s := newFake(t, &sessiontest.Launcher{}, Config{})
	if _, err := s.Start(t.Context(), "t", "r", recorded(false, "fake")); !errors.Is(err, ErrInvalidSpec) || !errors.Is(err, ErrRecordingOff) {
		t.Errorf("record without a directory: %v", err)
	}
	sp := untimed("fake")
	sp.RecordInput = true
	if _, err := s.Start(t.Context(), "t", "i", sp); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("record input without a recording: %v", err)
	}
	if _, err := New(Config{Launcher: &sessiontest.Launcher{}, RecordingsDir: t.TempDir(), RecordingMaxSize: 100}); err == nil {
		t.Error("a max size below the minimum was accepted")
	}
}

// TestRecordingAcrossRestart: after a restart (Detach, then Restore) the
// recording goes on in the same file; after a crash (the detaching
// server left no recorder state) it ends with a marker saying the
// restart cut it.
func TestRecordingAcrossRestart(t *testing.T) {
	t.Parallel()
	for _, crash := range []bool{false, true} {
		state, casts := filepath.Join(t.TempDir(), "state"), t.TempDir()
		if err := os.Mkdir(state, 0o700); err != nil {
			t.Fatal(err)
		}
		l := &sessiontest.Launcher{Keep: true, Script: echoUntilEOF}
		a, err := New(Config{Launcher: l, StateDir: state, RecordingsDir: casts})
		if err != nil {
			t.Fatal(err)
		}
		sp := recorded(true, "fake")
		sp.Policy.TTY = nil // pipes: output comes back as it was written
		if _, err := a.Start(t.Context(), "t", "job", sp); err != nil {
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
		if crash {
			os.Remove(filepath.Join(state, "executions", DirKey("t", "job"), "recorder.json"))
		}
		b, err := New(Config{Launcher: l, StateDir: state, RecordingsDir: casts})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close(context.Background()) })
		if _, err := b.Restore(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Input("t", "job", 4, []byte("quit\n")); err != nil {
			t.Fatal(err)
		}
		res := finished(t, b, "job")
		_, evs := readCast(t, onlyCast(t, casts))
		out, in, marks := joined(evs, "o"), joined(evs, "i"), joined(evs, "m")
		if crash {
			if res.Recording == nil || !res.Recording.Cut || !strings.Contains(marks, "recording cut") || out != "ready\necho:one\n" {
				t.Errorf("crash: result %+v, output %q, markers %q", res.Recording, out, marks)
			}
			continue
		}
		if res.Recording == nil || res.Recording.Cut || marks != "" || out != "ready\necho:one\necho:quit\n" || in != "one\nquit\n" {
			t.Errorf("restart: result %+v, output %q, input %q, markers %q", res.Recording, out, in, marks)
		}
	}
}

// TestRecordingPlaysBackWithAsciinema records a real terminal program
// that prints half of a character, sleeps, and prints the rest, and plays
// the file back with asciinema cat: it must give the terminal's output
// byte for byte.
func TestRecordingPlaysBackWithAsciinema(t *testing.T) {
	t.Parallel()
	asciinema, err := exec.LookPath("asciinema")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("asciinema is missing (apt-get install asciinema)")
		}
		t.Skip("asciinema is missing (apt-get install asciinema)")
	}
	dir := t.TempDir()
	s, err := New(Config{Launcher: SandboxLauncher(integrationLauncher.Get(t)), RecordingsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	sp := recorded(false, "/bin/sh", "-c", `printf 'price: \342\202'; sleep 0.3; printf '\254 \360\237\230\200 done\n'; seq 1 2000`)
	sp.Policy.Workspace = sandboxtest.Dir(t)
	if _, err := s.Start(t.Context(), "t", "real", sp); err != nil {
		t.Fatal(err)
	}
	res := finished(t, s, "real")
	if res.Stdout.Truncated {
		t.Fatalf("output truncated: %+v", res.Stdout)
	}
	want := res.Stdout.Head
	path := onlyCast(t, dir)
	got := asciinemaCat(t, asciinema, path)
	if !bytes.Equal(got, want) {
		t.Fatalf("asciinema cat gave %d bytes, the terminal %d:\n%q\nwant\n%q", len(got), len(want), got[:min(len(got), 200)], want[:min(len(want), 200)])
	}
	if !bytes.Contains(want, []byte("price: € 😀 done")) {
		t.Errorf("output %q", want[:min(len(want), 100)])
	}
	_, evs := readCast(t, path)
	for _, ev := range evs {
		if strings.ContainsRune(ev.Data, '\uFFFD') {
			t.Errorf("event %+v holds a replacement character", ev)
		}
	}
}

// asciinemaCat returns what asciinema cat prints for the recording at
// path. It opens /dev/tty, so it runs in a session of its own with a
// terminal as its controlling one; its output goes to a pipe, untouched
// by any terminal.
func asciinemaCat(t *testing.T, asciinema, path string) []byte {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, asciinema, "cat", path)
	cmd.Env = append(os.Environ(), "LANG=C.UTF-8", "PYTHONIOENCODING=utf-8")
	cmd.Stdin = tty
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Run(); err != nil {
		t.Fatalf("asciinema cat: %v: %s", err, errOut.Bytes())
	}
	return out.Bytes()
}

// TestRecordingBudgetAcrossRestart: recordings being written count at
// their bound, also once a restarted supervisor goes on with them, and
// count at their size once closed; a start past the owner's budget is
// refused with ErrRecordingBudget, another owner's is not.
func TestRecordingBudgetAcrossRestart(t *testing.T) {
	t.Parallel()
	state, casts := filepath.Join(t.TempDir(), "state"), t.TempDir()
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	l := &sessiontest.Launcher{Keep: true, Script: echoUntilEOF}
	cfg := Config{Launcher: l, StateDir: state, RecordingsDir: casts, RecordingMaxSize: MinRecordingMaxSize,
		RecordingsMaxBytesPerOwner: 2*MinRecordingMaxSize + 1024}
	sp := recorded(false, "fake")
	sp.Policy.TTY = nil
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"one", "two"} {
		if _, err := a.Start(t.Context(), "t", id, sp); err != nil {
			t.Fatal(err)
		}
	}
	_, err = a.Start(t.Context(), "t", "three", sp)
	if !errors.Is(err, ErrRecordingBudget) || !errors.Is(err, ErrCapacity) {
		t.Fatalf("a third recording of 4K within 9K: %v", err)
	}
	if !strings.Contains(err.Error(), "until one of the 2 being written ends") {
		t.Errorf("the refusal does not say that the recordings being written hold the budget: %v", err)
	}
	if err := a.Detach(t.Context()); err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	if _, err := b.Restore(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Start(t.Context(), "t", "three", sp); !errors.Is(err, ErrRecordingBudget) {
		t.Fatalf("after a restart, a third recording of 4K within 9K: %v", err)
	}
	if _, err := b.Start(t.Context(), "u", "three", sp); err != nil {
		t.Fatalf("another owner's recording: %v", err)
	}
	if _, err := b.Input("t", "one", 0, []byte("quit\n")); err != nil {
		t.Fatal(err)
	}
	for info := (Info{}); info.Result == nil; {
		if info, err = b.Wait(t.Context(), "t", "one", 1<<62, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	WaitRecorder(b, "t", "one")
	if _, err := b.Start(t.Context(), "t", "three", sp); err != nil {
		t.Fatalf("once a recording closed small: %v", err)
	}
	if st := b.Stats(); st.Refused[RefusedRecordingBudget] != 1 {
		t.Errorf("refusals counted: %v", st.Refused)
	}
}

// TestRecordingsSweptWhileNewChecksRoom: the sweeper deletes a recording
// whose retention passed while the supervisor that started it lives on;
// New's check of the free space (which reads what the recordings take)
// and the sweeps that count them again do not race.
func TestRecordingsSweptWhileNewChecksRoom(t *testing.T) {
	t.Parallel()
	casts := t.TempDir()
	s := newFake(t, &sessiontest.Launcher{}, Config{RecordingsDir: casts, RecordingsRetention: time.Millisecond})
	old := filepath.Join(casts, "old.cast")
	if err := os.WriteFile(old, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(old, time.Now().Add(-time.Hour), time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	gone := func() bool { _, err := os.Stat(old); return errors.Is(err, os.ErrNotExist) }
	if !sandboxtest.Eventually(t, 10*time.Second, gone) {
		t.Fatal("a recording past its retention was not deleted in 10s")
	}
	if !s.Recording() {
		t.Error("the supervisor does not record")
	}
}
