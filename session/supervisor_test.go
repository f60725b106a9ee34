package session_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	. "github.com/termgate/termgate/session" // the tests read as the package's own
	"github.com/termgate/termgate/session/sessiontest"
)

func TestMain(m *testing.M) {
	sandboxtest.Main(m, sandboxtest.After(integrationLauncher.Release), sandboxtest.Ignore(sandboxtest.Forker))
}

func spec(cmd ...string) Spec {
	return Spec{Policy: sandbox.Policy{Command: cmd, Workspace: "/nonexistent-fake"}}
}

// untimed is spec without the default timeout.
func untimed(cmd ...string) Spec {
	sp := spec(cmd...)
	sp.Timeout = -1
	return sp
}

func newFake(t *testing.T, l *sessiontest.Launcher, cfg Config) *Supervisor {
	t.Helper()
	cfg.Launcher = l
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// drain reads a subscription to its end and returns the output bytes and
// the events.
func drain(t *testing.T, sub *Subscription) ([]byte, []replay.Event) {
	t.Helper()
	out, all, err := drainErr(sub)
	if err != nil {
		t.Fatal(err)
	}
	return out, all
}

// drainErr is drain for goroutines other than the test's.
func drainErr(sub *Subscription) ([]byte, []replay.Event, error) {
	var out []byte
	var all []replay.Event
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Hour) // fake time under synctest
	defer cancel()
	for {
		evs, gap, err := sub.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out, all, nil
		}
		if err != nil {
			return out, all, fmt.Errorf("next: %w", err)
		}
		if gap != nil {
			return out, all, fmt.Errorf("unexpected gap %+v", gap)
		}
		for _, ev := range evs {
			ev.Data = append([]byte(nil), ev.Data...)
			all = append(all, ev)
			if ev.Kind == replay.KindOutput {
				out = append(out, ev.Data...)
			}
		}
	}
}

func TestStartIsIdempotentByOwnerAndID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &sessiontest.Launcher{Script: sessiontest.UntilStopped}
		s := newFake(t, l, Config{})
		a, err := s.Start(t.Context(), "acme", "build-1", spec("make"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Start(t.Context(), "acme", "build-1", spec("make"))
		if err != nil || b.ID != a.ID || len(l.Procs()) != 1 {
			t.Fatalf("retried start: %+v, %v, %d processes", b, err, len(l.Procs()))
		}
		if _, err := s.Start(t.Context(), "acme", "build-1", spec("make", "install")); !errors.Is(err, ErrConflict) {
			t.Fatalf("same id, other spec: %v", err)
		}
		// Another owner's ID is unknown to this one: a start creates its own.
		if _, err := s.Start(t.Context(), "other", "build-1", spec("make", "install")); err != nil || len(l.Procs()) != 2 {
			t.Fatalf("other owner's start: %v", err)
		}
		if _, err := s.Get("other", "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unknown id: %v", err)
		}
		for _, op := range []func() error{
			func() error { return s.Cancel("intruder", "build-1") },
			func() error { _, err := s.Input("intruder", "build-1", 0, []byte("x")); return err },
			func() error { _, _, err := s.Attach("intruder", "build-1", 0); return err },
			func() error { _, err := s.Get("intruder", "build-1"); return err },
		} {
			if err := op(); !errors.Is(err, ErrNotFound) || err.Error() != "session: execution not found: build-1" {
				t.Errorf("another owner's execution must look unknown, got %v", err)
			}
		}
	})
}

func TestInvalidIDsAndSpecs(t *testing.T) {
	t.Parallel()
	s := newFake(t, &sessiontest.Launcher{}, Config{})
	for _, id := range []string{"-x", ".x", "a/b", strings.Repeat("a", 129), "a b", "é"} {
		if _, err := s.Start(t.Context(), "o", id, spec("true")); !errors.Is(err, ErrInvalidID) {
			t.Errorf("id %q: %v", id, err)
		}
	}
	if _, err := s.Start(t.Context(), "o", "", Spec{}); !errors.Is(err, ErrInvalidSpec) && !errors.Is(err, sandbox.ErrInvalidPolicy) {
		t.Errorf("empty spec: %v, want invalid_spec", err)
	}
	info, err := s.Start(t.Context(), "o", "", spec("true"))
	if err != nil || !IDPattern.MatchString(info.ID) {
		t.Errorf("generated id %q: %v", info.ID, err)
	}
}

func TestLifecycleStatuses(t *testing.T) {
	cases := []struct {
		name   string
		script func(*sessiontest.Proc) sandbox.Exit
		act    func(s *Supervisor, id string)
		want   Status
		reason string
	}{
		{"exited", sessiontest.SleepFor(time.Second, 3), nil, StatusExited, "exited with code 3"},
		{"cancelled", sessiontest.UntilStopped, func(s *Supervisor, id string) { s.Cancel("o", id) }, StatusCancelled, "cancelled"},
		{"timed out", sessiontest.UntilStopped, nil, StatusTimedOut, "timed out after 2m0s"},
		{"limit", func(*sessiontest.Proc) sandbox.Exit {
			return sandbox.Exit{Code: -1, Signal: syscall.SIGKILL, Limit: sandbox.LimitMemory}
		}, nil, StatusLimit, "memory ceiling"},
		{"failed", func(*sessiontest.Proc) sandbox.Exit { return sandbox.Exit{Code: -1, SetupError: "bwrap: boom"} }, nil, StatusFailed, "bwrap: boom"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newFake(t, &sessiontest.Launcher{Script: c.script}, Config{})
				start := time.Now()
				info, err := s.Start(t.Context(), "o", "x", spec("cmd"))
				if err != nil {
					t.Fatal(err)
				}
				if c.act != nil {
					c.act(s, info.ID)
				}
				sub, _, _ := s.Attach("o", info.ID, 0)
				_, evs := drain(t, sub)
				got, _ := s.Get("o", info.ID)
				if got.Status != c.want || !strings.Contains(got.Result.Reason, c.reason) {
					t.Fatalf("status %s (%q), want %s (%q)", got.Status, got.Result.Reason, c.want, c.reason)
				}
				last := evs[len(evs)-1]
				if last.Kind != replay.KindExit || evs[0].Kind != replay.KindStarted {
					t.Fatalf("events must start with started and end with exit: %v", evs)
				}
				if c.want == StatusTimedOut && time.Since(start) != DefaultTimeout {
					t.Errorf("timed out after %v, want %v", time.Since(start), DefaultTimeout)
				}
			})
		})
	}
}

func TestLaunchFailures(t *testing.T) {
	t.Parallel()
	l := &sessiontest.Launcher{Err: fmt.Errorf("%w: workspace: no such directory", sandbox.ErrInvalidPolicy)}
	s := newFake(t, l, Config{})
	if _, err := s.Start(t.Context(), "o", "a", spec("x")); !errors.Is(err, sandbox.ErrInvalidPolicy) {
		t.Fatalf("invalid policy: %v", err)
	}
	if _, err := s.Get("o", "a"); !errors.Is(err, ErrNotFound) || s.Stats().StartedTotal != 0 {
		t.Fatalf("a refused spec must leave nothing behind: %v, %+v", err, s.Stats())
	}
	l.Err = errors.New("bwrap exploded")
	info, err := s.Start(t.Context(), "o", "b", spec("x"))
	if err != nil || info.Status != StatusFailed || !strings.Contains(info.Result.Reason, "bwrap exploded") {
		t.Fatalf("failed start: %+v, %v", info, err)
	}
}

func TestRetentionExpiresByTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFake(t, &sessiontest.Launcher{Script: sessiontest.SleepFor(time.Second, 0)}, Config{})
		sp := spec("x")
		sp.Retention = time.Minute
		info, _ := s.Start(t.Context(), "o", "r", sp)
		time.Sleep(time.Second + time.Minute - time.Millisecond)
		synctest.Wait()
		if got, err := s.Get("o", info.ID); err != nil || got.Status != StatusExited {
			t.Fatalf("before retention expiry: %+v, %v", got, err)
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if _, err := s.Get("o", info.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("after retention expiry: %v", err)
		}
		if st := s.Stats(); st.Retained != 0 || st.ByStatus[StatusExited] != 1 {
			t.Fatalf("stats: %+v", st)
		}
	})
}

func TestCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFake(t, &sessiontest.Launcher{Script: sessiontest.SleepArg}, Config{MaxRunning: 3, MaxRunningPerOwner: 2, MaxRetained: 4})
		for i, owner := range []string{"a", "a", "b"} {
			if _, err := s.Start(t.Context(), owner, fmt.Sprint("x", i), untimed("sleep", fmt.Sprint(i+1, "h"))); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Start(t.Context(), "a", "x9", untimed("sleep", "1h")); !errors.Is(err, ErrCapacity) {
			t.Fatalf("per-owner ceiling: %v", err)
		}
		if _, err := s.Start(t.Context(), "c", "x9", untimed("sleep", "1h")); !errors.Is(err, ErrCapacity) {
			t.Fatalf("total ceiling: %v", err)
		}
		time.Sleep(3*time.Hour + time.Second) // x0, x1, x2 end an hour apart
		synctest.Wait()
		for _, k := range []struct{ owner, id string }{{"c", "y0"}, {"c", "y1"}, {"d", "z0"}} {
			if _, err := s.Start(t.Context(), k.owner, k.id, untimed("sleep", "1h")); err != nil {
				t.Fatalf("start %v: %v", k, err)
			}
		}
		if _, err := s.Start(t.Context(), "e", "z1", untimed("sleep", "1h")); !errors.Is(err, ErrCapacity) {
			t.Fatalf("every slot running: %v", err)
		}
		// Four retained slots: the two oldest settled executions made room.
		for id, want := range map[string]error{"x0": ErrNotFound, "x1": ErrNotFound} {
			if _, err := s.Get("a", id); !errors.Is(err, want) {
				t.Errorf("%s: %v", id, err)
			}
		}
		if _, err := s.Get("b", "x2"); err != nil {
			t.Errorf("newest settled evicted: %v", err)
		}
		if st := s.Stats(); st.Running != 3 || st.Retained != 1 || st.StartedTotal != 6 {
			t.Fatalf("stats: %+v", st)
		}
	})
}

func TestCapacityAllRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFake(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, Config{MaxRetained: 2})
		s.Start(t.Context(), "o", "a", spec("x"))
		s.Start(t.Context(), "o", "b", spec("x"))
		_, err := s.Start(t.Context(), "o", "c", spec("x"))
		if !errors.Is(err, ErrCapacity) || !strings.Contains(err.Error(), "all running") {
			t.Fatalf("all running: %v", err)
		}
	})
}

func TestInputByOffsetIsAppliedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &sessiontest.Launcher{Script: sessiontest.UntilStopped}
		s := newFake(t, l, Config{InputBuffer: 8})
		info, _ := s.Start(t.Context(), "o", "in", spec("cat"))
		steps := []struct {
			off  uint64
			data string
			want uint64
			err  error
		}{
			{0, "abc", 3, nil},
			{0, "abc", 3, nil},  // retried after a reconnect: dropped
			{2, "cdef", 6, nil}, // overlaps: only "def" is new
			{9, "x", 6, ErrInputOffset},
			{6, "123456789", 6, ErrInputFull}, // larger than the buffer
		}
		for _, st := range steps {
			got, err := s.Input("o", info.ID, st.off, []byte(st.data))
			if got != st.want || !errors.Is(err, st.err) {
				t.Errorf("Input(%d, %q) = %d, %v; want %d, %v", st.off, st.data, got, err, st.want, st.err)
			}
			synctest.Wait()
		}
		if got, _ := l.Procs()[0].Input(); got != "abcdef" {
			t.Errorf("stdin got %q, want abcdef", got)
		}
		if err := s.CloseStdin("o", info.ID); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if _, closed := l.Procs()[0].Input(); !closed {
			t.Error("stdin not closed")
		}
		s.Cancel("o", info.ID)
	})
}

func TestResizeSignalAndEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &sessiontest.Launcher{Script: sessiontest.UntilStopped}
		s := newFake(t, l, Config{})
		sp := spec("bash")
		sp.Policy.TTY = &sandbox.WindowSize{Rows: 24, Cols: 80}
		info, _ := s.Start(t.Context(), "o", "t", sp)
		if err := s.Resize("o", info.ID, 0, 5000); err != nil {
			t.Fatal(err)
		}
		if err := s.Signal("o", info.ID, "sigint"); err != nil {
			t.Fatal(err)
		}
		if err := s.Signal("o", info.ID, "SEGV"); !errors.Is(err, ErrSignal) {
			t.Errorf("signal outside the allowlist: %v", err)
		}
		if err := s.CloseStdin("o", info.ID); !errors.Is(err, ErrNoPipes) {
			t.Errorf("close-stdin on a PTY: %v", err)
		}
		s.Cancel("o", info.ID)
		sub, _, _ := s.Attach("o", info.ID, 0)
		_, evs := drain(t, sub)
		var kinds []string
		for _, ev := range evs {
			kinds = append(kinds, ev.Kind.String())
		}
		if got := strings.Join(kinds, ","); got != "started,resize,signal,signal,exit" {
			t.Errorf("events %s", got)
		}
		if evs[0].Rows != 24 || evs[1].Rows != 1 || evs[1].Cols != 1000 || evs[2].Signal != int(syscall.SIGINT) {
			t.Errorf("event payloads: %+v", evs[:3])
		}
		p := l.Procs()[0]
		if sizes, signals := p.Sizes(), p.Signals(); len(sizes) != 1 || sizes[0] != (sandbox.WindowSize{Rows: 1, Cols: 1000}) || len(signals) == 0 || signals[0] != syscall.SIGINT {
			t.Errorf("process saw sizes %v, signals %v", sizes, signals)
		}
		if err := s.Resize("o", info.ID, 10, 10); !errors.Is(err, ErrNotRunning) {
			t.Errorf("resize after exit: %v", err)
		}
	})
}

func TestSplitCharacterArrivesIntact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &sessiontest.Launcher{Script: func(p *sessiontest.Proc) sandbox.Exit {
			p.Stdio.Stdout.Write([]byte("price: \xe2\x82"))
			p.Stdio.Stdout.Write([]byte("\xac\n"))
			return sandbox.Exit{}
		}}
		s := newFake(t, l, Config{})
		info, _ := s.Start(t.Context(), "o", "u", spec("x"))
		sub, _, _ := s.Attach("o", info.ID, 0)
		out, _ := drain(t, sub)
		got, _ := s.Get("o", info.ID)
		if string(out) != "price: €\n" || string(got.Result.Stdout.Head) != "price: €\n" {
			t.Errorf("stream %q, final %q", out, got.Result.Stdout.Head)
		}
	})
}

func TestFinalOutputKeepsHeadAndTail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &sessiontest.Launcher{Script: func(p *sessiontest.Proc) sandbox.Exit {
			p.Stdio.Stdout.Write([]byte(strings.Repeat("é", 100))) // 200 bytes
			p.Stdio.Stderr.Write([]byte("warn\n"))
			return sandbox.Exit{Code: 1}
		}}
		s := newFake(t, l, Config{})
		sp := spec("x")
		sp.OutputBudget = 33
		info, _ := s.Start(t.Context(), "o", "h", sp)
		sub, _, _ := s.Attach("o", info.ID, 0)
		drain(t, sub)
		res := mustGet(t, s, "o", info.ID).Result
		o := res.Stdout
		if string(o.Head) != strings.Repeat("é", 8) || string(o.Tail) != strings.Repeat("é", 8) || !o.Truncated ||
			o.Original != 200 || o.Retained != 32 || o.Omitted != 168 {
			t.Errorf("stdout %+v", o)
		}
		if string(res.Stderr.Head) != "warn\n" || res.Stderr.Truncated {
			t.Errorf("stderr %+v", res.Stderr)
		}
	})
}

func mustGet(t *testing.T, s *Supervisor, owner, id string) Info {
	t.Helper()
	info, err := s.Get(owner, id)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestReplayThenLiveUnderLoad attaches while the process writes at full
// speed: every byte must arrive exactly once, checked by sequence and offset.
func TestReplayThenLiveUnderLoad(t *testing.T) {
	t.Parallel()
	const chunks = 20000
	started := make(chan struct{})
	l := &sessiontest.Launcher{Script: func(p *sessiontest.Proc) sandbox.Exit {
		buf := make([]byte, 100)
		for i := range chunks {
			if i == 1000 {
				close(started)
			}
			copy(buf, fmt.Sprintf("%099d\n", i))
			p.Stdio.Stdout.Write(buf)
		}
		return sandbox.Exit{}
	}}
	s := newFake(t, l, Config{})
	sp := spec("x")
	sp.Ring = replay.Config{MaxBytes: 64 << 20, MaxEvents: 1 << 20}
	info, _ := s.Start(t.Context(), "o", "load", sp)
	<-started
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub, _, _ := s.Attach("o", info.ID, 0)
			out, evs, err := drainErr(sub)
			if err != nil {
				t.Error(err)
				return
			}
			if err := continuity(evs); err != nil {
				t.Error(err)
			}
			if len(out) != chunks*100 {
				t.Errorf("got %d bytes, want %d", len(out), chunks*100)
				return
			}
			for i := range chunks {
				if want := fmt.Sprintf("%099d\n", i); string(out[i*100:i*100+100]) != want {
					t.Errorf("chunk %d corrupted", i)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func checkContinuity(t *testing.T, evs []replay.Event) {
	t.Helper()
	if err := continuity(evs); err != nil {
		t.Error(err)
	}
}

// continuity checks sequence numbers from 1 without gaps and per-stream
// offsets without holes or overlaps.
func continuity(evs []replay.Event) error {
	offsets := map[replay.Stream]uint64{}
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			return fmt.Errorf("event %d has seq %d", i, ev.Seq)
		}
		if ev.Kind == replay.KindOutput {
			if ev.Offset != offsets[ev.Stream] {
				return fmt.Errorf("seq %d: offset %d, want %d", ev.Seq, ev.Offset, offsets[ev.Stream])
			}
			offsets[ev.Stream] += uint64(len(ev.Data))
		}
	}
	return nil
}

// TestSlowSubscriberDoesNotGrowMemory: with Live flow, a subscriber that
// never reads only falls behind; the ring stays within its bound and the
// reader sees a gap.
func TestSlowSubscriberDoesNotGrowMemory(t *testing.T) {
	t.Parallel()
	l := &sessiontest.Launcher{Script: func(p *sessiontest.Proc) sandbox.Exit {
		b := bytes.Repeat([]byte("x"), 4096)
		for range 4096 { // 16 MiB
			p.Stdio.Stdout.Write(b)
		}
		return sandbox.Exit{}
	}}
	s := newFake(t, l, Config{})
	sp := spec("x")
	sp.Ring = replay.Config{MaxBytes: 256 << 10}
	sp.Live = true
	info, _ := s.Start(t.Context(), "o", "slow", sp)
	sub, _, _ := s.Attach("o", info.ID, 0)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := s.Wait(ctx, "o", info.ID, 1<<62, time.Minute); err != nil {
		t.Fatal(err)
	}
	if !sandboxtest.Eventually(t, time.Minute, func() bool { return mustGet(t, s, "o", info.ID).Result != nil }) {
		t.Fatal("the execution did not end")
	}
	if st := RingStats(s, "o", info.ID); st.Bytes > 256<<10 || st.OutputBytes != 16<<20 {
		t.Fatalf("ring holds %d bytes after %d appended", st.Bytes, st.OutputBytes)
	}
	_, gap, err := sub.Next(ctx)
	if err != nil || gap == nil || gap.From != 1 || gap.To < 2 || gap.Bytes == 0 {
		t.Fatalf("the idle subscriber must see a gap first: %+v, %v", gap, err)
	}
}

func TestWaitLongPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFake(t, &sessiontest.Launcher{Script: func(p *sessiontest.Proc) sandbox.Exit {
			time.Sleep(10 * time.Second)
			p.Stdio.Stdout.Write([]byte("tick"))
			time.Sleep(10 * time.Second)
			return sandbox.Exit{}
		}}, Config{})
		info, _ := s.Start(t.Context(), "o", "w", spec("x"))
		start := time.Now()
		got, _ := s.Wait(t.Context(), "o", info.ID, 0, 25*time.Second)
		if time.Since(start) != 0 || got.LastSeq != 1 {
			t.Fatalf("events exist: returned after %v with %+v", time.Since(start), got)
		}
		got, _ = s.Wait(t.Context(), "o", info.ID, 1, 25*time.Second)
		if time.Since(start) != 10*time.Second || got.LastSeq != 2 {
			t.Fatalf("new output: returned after %v with %+v", time.Since(start), got)
		}
		got, _ = s.Wait(t.Context(), "o", info.ID, 2, 5*time.Second)
		if time.Since(start) != 15*time.Second || got.Status != StatusRunning {
			t.Fatalf("timeout: returned after %v with %+v", time.Since(start), got)
		}
		got, _ = s.Wait(t.Context(), "o", info.ID, 2, 25*time.Second)
		if time.Since(start) != 20*time.Second || got.Status != StatusExited {
			t.Fatalf("exit: returned after %v with %+v", time.Since(start), got)
		}
	})
}

func TestCloseStopsEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &sessiontest.Launcher{Script: sessiontest.UntilStopped}
		s, _ := New(Config{Launcher: l})
		for i := range 3 {
			s.Start(t.Context(), "o", fmt.Sprint("c", i), spec("x"))
		}
		if err := s.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Start(t.Context(), "o", "late", spec("x")); !errors.Is(err, ErrClosed) {
			t.Fatalf("start after close: %v", err)
		}
		if st := s.Stats(); st.ByStatus[StatusCancelled] != 3 || st.Running != 0 {
			t.Fatalf("stats after close: %+v", st)
		}
	})
}

// TestEvictionSparesOtherTenants: a tenant that churns through executions
// evicts its own results, not another tenant's.
func TestEvictionSparesOtherTenants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFake(t, &sessiontest.Launcher{Script: sessiontest.SleepFor(time.Second, 0)}, Config{MaxRetained: 4})
		s.Start(t.Context(), "quiet", "keep", spec("x"))
		time.Sleep(2 * time.Second) // quiet's result is now the oldest
		for i := range 10 {
			if _, err := s.Start(t.Context(), "busy", fmt.Sprint("b", i), spec("x")); err != nil {
				t.Fatalf("busy start %d: %v", i, err)
			}
			time.Sleep(2 * time.Second)
		}
		if info, err := s.Get("quiet", "keep"); err != nil || info.Status != StatusExited {
			t.Fatalf("another tenant's churn evicted this result: %v", err)
		}
		if len(s.List("busy")) != 3 {
			t.Fatalf("busy keeps %d executions, want 3", len(s.List("busy")))
		}
	})
}

// TestRetainedPerOwnerCap: one owner holds at most MaxRetainedPerOwner
// executions, running or settled, so it cannot take every retained slot;
// beyond it the owner's own oldest settled result makes room, and when
// all of its executions run it is at capacity.
func TestRetainedPerOwnerCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFake(t, &sessiontest.Launcher{Script: sessiontest.SleepArg}, Config{MaxRetained: 100, MaxRetainedPerOwner: 3})
		for i := range 3 {
			if _, err := s.Start(t.Context(), "busy", fmt.Sprint("b", i), untimed("sleep", fmt.Sprint(i+1, "s"))); err != nil {
				t.Fatal(err)
			}
		}
		_, err := s.Start(t.Context(), "busy", "b3", untimed("sleep", "1h"))
		if !errors.Is(err, ErrCapacity) || !strings.Contains(err.Error(), "3 executions retained for this owner") {
			t.Fatalf("a fourth while three run: %v", err)
		}
		if _, err := s.Start(t.Context(), "other", "o0", untimed("sleep", "1h")); err != nil {
			t.Fatalf("another owner is refused: %v", err)
		}
		time.Sleep(2*time.Second + time.Millisecond) // b0 and b1 have ended
		synctest.Wait()
		for _, id := range []string{"b3", "b4"} {
			if _, err := s.Start(t.Context(), "busy", id, untimed("sleep", "1h")); err != nil {
				t.Fatalf("start %s with settled results to evict: %v", id, err)
			}
		}
		if n := len(s.List("busy")); n != 3 {
			t.Fatalf("busy holds %d executions, want 3", n)
		}
		for id, want := range map[string]error{"b0": ErrNotFound, "b1": ErrNotFound, "b2": nil} {
			if _, err := s.Get("busy", id); !errors.Is(err, want) {
				t.Errorf("%s: %v, want %v", id, err, want)
			}
		}
	})
}

func TestRetainedPerOwnerDefault(t *testing.T) {
	s := newFake(t, &sessiontest.Launcher{Script: sessiontest.SleepArg}, Config{})
	if ConfigOf(s).MaxRetainedPerOwner != DefaultMaxRetainedPerOwner || DefaultMaxRetainedPerOwner != 128 {
		t.Fatalf("default per-owner retention %d", ConfigOf(s).MaxRetainedPerOwner)
	}
}

// TestDescriptorExhaustionIsCapacity: running out of file descriptors
// anywhere in a start is the server at capacity, whatever the sandbox
// wrapped it in: the start is refused (nothing kept, so a retry can
// succeed) with the capacity code, never kept as a failed run, internal
// or invalid_spec.
func TestDescriptorExhaustionIsCapacity(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"EMFILE", fmt.Errorf("open pty: %w", &os.PathError{Op: "open", Path: "/dev/ptmx", Err: syscall.EMFILE})},
		{"ENFILE", fmt.Errorf("start bwrap: %w", syscall.ENFILE)},
		{"EMFILE as invalid policy", fmt.Errorf("%w: workspace: %w", sandbox.ErrInvalidPolicy, syscall.EMFILE)},
		{"ENFILE as unenforceable", fmt.Errorf("cgroup: %w: %w", sandbox.ErrUnenforceable, syscall.ENFILE)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := &sessiontest.Launcher{Err: tt.err}
			s := newFake(t, l, Config{})
			_, err := s.Start(t.Context(), "o", "a", spec("x"))
			if !errors.Is(err, ErrCapacity) {
				t.Fatalf("start: %v, want capacity", err)
			}
			if strings.Contains(err.Error(), "/dev/ptmx") {
				t.Errorf("error %q shows internals", err)
			}
			if _, err := s.Get("o", "a"); !errors.Is(err, ErrNotFound) || s.Stats().StartedTotal != 0 {
				t.Fatalf("a start out of descriptors left something behind: %v, %+v", err, s.Stats())
			}
			l.Err = nil
			if info, err := s.Start(t.Context(), "o", "a", spec("x")); err != nil || info.Status == StatusFailed {
				t.Fatalf("retry: %+v, %v", info, err)
			}
		})
	}
	if !OutOfDescriptors(fmt.Errorf("gateway: open workspace root: %w", syscall.EMFILE)) {
		t.Error("an EMFILE outside a start is not out of descriptors (capacity)")
	}
}

// releasingLauncher hands out processes whose Release, which follows the
// exit's record, takes a while.
type releasingLauncher struct {
	sessiontest.Launcher
	done sync.Map // process -> true once Release returned
}

type releasingProc struct {
	Process
	l *releasingLauncher
}

func (p releasingProc) Release() error {
	time.Sleep(200 * time.Millisecond)
	p.l.done.Store(p.Process, true)
	return nil
}

func (l *releasingLauncher) Start(ctx context.Context, p sandbox.Policy, stdio sandbox.Stdio) (Process, error) {
	proc, err := l.Launcher.Start(ctx, p, stdio)
	if err != nil {
		return nil, err
	}
	return releasingProc{proc, l}, nil
}

// TestCloseWaitsForRelease: Close returns only once every ended process
// was released. A keeper keeps an exit that was never released for the
// next server, and waits its orphan grace (10 minutes) for one that never
// comes after a shutdown for good.
func TestCloseWaitsForRelease(t *testing.T) {
	l := &releasingLauncher{Launcher: sessiontest.Launcher{Script: sessiontest.UntilStopped}}
	s, err := New(Config{Launcher: l})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if _, err := s.Start(t.Context(), "acme", id, spec("sh")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	n := 0
	l.done.Range(func(_, _ any) bool { n++; return true })
	if n != 2 {
		t.Errorf("Close returned with %d of 2 ended processes released", n)
	}
}
