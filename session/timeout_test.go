package session_test

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	. "github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// shell is an interactive spec: a terminal, with the default timeouts.
func shell() Spec {
	sp := spec("bash")
	sp.Policy.TTY = &sandbox.WindowSize{Rows: 24, Cols: 80}
	return sp
}

// notices returns the notice events among evs.
func notices(evs []replay.Event) []replay.Event {
	var out []replay.Event
	for _, ev := range evs {
		if ev.Kind == replay.KindNotice {
			out = append(out, ev)
		}
	}
	return out
}

// watch follows an execution read-only, as a viewer who never counts as
// a writer, and returns its events once it ended.
func watch(t *testing.T, s *Supervisor, id string) []replay.Event {
	t.Helper()
	sub, _, err := s.Attach("o", id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	_, evs := drain(t, sub)
	return evs
}

// checkNotice checks that ev is a notice of reason, given at when and
// announcing at.
func checkNotice(t *testing.T, ev replay.Event, reason string, when, at time.Time) {
	t.Helper()
	n := ev.Notice
	if n == nil || n.Reason != reason || !ev.Time.Equal(when) || !n.At.Equal(at) || n.Message == "" {
		t.Errorf("notice %+v at %v; want reason %s at %v announcing %v, with a message", n, ev.Time, reason, when, at)
	}
}

// checkTimedOut checks that id ended timed out after d, with a reason
// that contains want, and that its exit event says so (ringReason).
func checkTimedOut(t *testing.T, s *Supervisor, id string, evs []replay.Event, d time.Duration, want, ringReason string) {
	t.Helper()
	info, _ := s.Get("o", id)
	if info.Status != StatusTimedOut || !strings.Contains(info.Result.Reason, want) {
		t.Errorf("status %s (%q), want %s with %q", info.Status, info.Result.Reason, StatusTimedOut, want)
	}
	if info.Result != nil && info.Result.Ended.Sub(info.Started) != d {
		t.Errorf("ended after %v, want %v", info.Result.Ended.Sub(info.Started), d)
	}
	if last := evs[len(evs)-1]; last.Kind != replay.KindExit || last.Exit.Reason != ringReason {
		t.Errorf("last event %v %+v, want exit %q", last.Kind, last.Exit, ringReason)
	}
}

func TestInteractiveOutlivesBatchTimeoutAndDiesIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFake(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, Config{})
		start := time.Now()
		info, err := s.Start(t.Context(), "o", "sh", shell())
		if err != nil {
			t.Fatal(err)
		}
		evs := watch(t, s, info.ID)
		ns := notices(evs)
		if len(ns) != 1 {
			t.Fatalf("notices %+v, want one idle warning", ns)
		}
		fire := start.Add(DefaultIdleTimeout)
		checkNotice(t, ns[0], NoticeIdleTimeout, fire.Add(-DefaultTimeoutWarning), fire)
		checkTimedOut(t, s, info.ID, evs, DefaultIdleTimeout, "idle", "timed_out:idle")
	})
}

func TestIdleTimeoutIsPostponed(t *testing.T) {
	cases := []struct {
		name string
		// act runs once the shell started; it returns when the idle clock
		// (last input, or the last writer leaving) restarted.
		act func(t *testing.T, s *Supervisor, id string)
		// at is when the idle clock restarted, from the start.
		at time.Duration
		// cancelled: an idle warning was given, then withdrawn.
		cancelled bool
	}{
		{"input", func(t *testing.T, s *Supervisor, id string) {
			time.Sleep(10 * time.Minute)
			if _, err := s.Input("o", id, 0, []byte("ls\r")); err != nil {
				t.Fatal(err)
			}
		}, 10 * time.Minute, false},
		{"writer attached", func(t *testing.T, s *Supervisor, id string) {
			sub, _, err := s.Subscribe("o", id, AttachOptions{Writer: true})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Minute) // far past the idle timeout
			sub.Close()
		}, 50 * time.Minute, false},
		{"input after the warning", func(t *testing.T, s *Supervisor, id string) {
			time.Sleep(DefaultIdleTimeout - DefaultTimeoutWarning/2)
			if _, err := s.Input("o", id, 0, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}, DefaultIdleTimeout - DefaultTimeoutWarning/2, true},
		{"writer after the warning", func(t *testing.T, s *Supervisor, id string) {
			time.Sleep(DefaultIdleTimeout - DefaultTimeoutWarning/2)
			sub, _, err := s.Subscribe("o", id, AttachOptions{Writer: true, Ack: true})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Hour)
			sub.Close()
		}, DefaultIdleTimeout - DefaultTimeoutWarning/2 + time.Hour, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newFake(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, Config{})
				start := time.Now()
				info, err := s.Start(t.Context(), "o", "sh", shell())
				if err != nil {
					t.Fatal(err)
				}
				sub, _, err := s.Attach("o", info.ID, 0) // a viewer: not a writer
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Close()
				got := make(chan []replay.Event, 1)
				go func() {
					_, evs, _ := drainErr(sub)
					got <- evs
				}()
				c.act(t, s, info.ID)
				evs := <-got
				ns := notices(evs)
				want := 1
				if c.cancelled {
					want = 3
				}
				if len(ns) != want {
					t.Fatalf("%d notices %+v, want %d", len(ns), ns, want)
				}
				if c.cancelled {
					first := start.Add(DefaultIdleTimeout)
					checkNotice(t, ns[0], NoticeIdleTimeout, first.Add(-DefaultTimeoutWarning), first)
					if ns[1].Notice.Reason != NoticeIdleCancelled || !ns[1].Notice.At.IsZero() {
						t.Errorf("second notice %+v, want %s without a time", ns[1].Notice, NoticeIdleCancelled)
					}
				}
				fire := start.Add(c.at + DefaultIdleTimeout)
				checkNotice(t, ns[len(ns)-1], NoticeIdleTimeout, fire.Add(-DefaultTimeoutWarning), fire)
				checkTimedOut(t, s, info.ID, evs, c.at+DefaultIdleTimeout, "idle", "timed_out:idle")
			})
		})
	}
}

func TestBatchTimeoutWarnsThenStops(t *testing.T) {
	cases := []struct {
		name    string
		timeout time.Duration
		lead    time.Duration
	}{
		{"default", 0, DefaultTimeoutWarning},
		{"shorter than twice the warning", 10 * time.Second, 5 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newFake(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, Config{})
				start := time.Now()
				sp := spec("make")
				sp.Timeout = c.timeout
				info, err := s.Start(t.Context(), "o", "build", sp)
				if err != nil {
					t.Fatal(err)
				}
				evs := watch(t, s, info.ID)
				d := cmpOr(c.timeout, DefaultTimeout)
				ns := notices(evs)
				if len(ns) != 1 {
					t.Fatalf("notices %+v, want one timeout warning", ns)
				}
				checkNotice(t, ns[0], NoticeTimeout, start.Add(d-c.lead), start.Add(d))
				checkTimedOut(t, s, info.ID, evs, d, "timed out after "+d.String(), "timed_out")
			})
		})
	}
}

func TestInteractiveAbsoluteTimeoutComesFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFake(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, Config{})
		start := time.Now()
		sp := shell()
		sp.Timeout = 10 * time.Minute // before the idle timeout
		info, err := s.Start(t.Context(), "o", "sh", sp)
		if err != nil {
			t.Fatal(err)
		}
		evs := watch(t, s, info.ID)
		ns := notices(evs)
		if len(ns) != 1 {
			t.Fatalf("notices %+v, want the timeout's warning only", ns)
		}
		fire := start.Add(10 * time.Minute)
		checkNotice(t, ns[0], NoticeTimeout, fire.Add(-DefaultTimeoutWarning), fire)
		checkTimedOut(t, s, info.ID, evs, 10*time.Minute, "timed out after 10m0s", "timed_out")
	})
}

func TestInteractiveDefaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A writer stays attached: only the absolute timeout of an
		// interactive execution applies. (drain waits 10 h at most.)
		if DefaultInteractiveTimeout <= DefaultTimeout {
			t.Errorf("an interactive execution's default timeout %v is not longer than a batch one's %v", DefaultInteractiveTimeout, DefaultTimeout)
		}
		s := newFake(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped}, Config{DefaultInteractiveTimeout: 3 * time.Hour})
		start := time.Now()
		info, err := s.Start(t.Context(), "o", "sh", shell())
		if err != nil {
			t.Fatal(err)
		}
		sub, _, err := s.Subscribe("o", info.ID, AttachOptions{Writer: true})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		_, evs := drain(t, sub)
		ns := notices(evs)
		if len(ns) != 1 {
			t.Fatalf("notices %+v, want the timeout's warning only", ns)
		}
		fire := start.Add(3 * time.Hour)
		checkNotice(t, ns[0], NoticeTimeout, fire.Add(-DefaultTimeoutWarning), fire)
		checkTimedOut(t, s, info.ID, evs, 3*time.Hour, "timed out after 3h0m0s", "timed_out")
	})
}

func TestPipesCanBeInteractive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFake(t, &sessiontest.Launcher{Script: sessiontest.UntilStopped},
			Config{DefaultIdleTimeout: 5 * time.Minute, TimeoutWarning: -1})
		start := time.Now()
		sp := spec("python3", "-i")
		sp.Interactive = true
		info, err := s.Start(t.Context(), "o", "repl", sp)
		if err != nil {
			t.Fatal(err)
		}
		evs := watch(t, s, info.ID)
		if ns := notices(evs); len(ns) != 0 {
			t.Errorf("notices %+v with the warning turned off", ns)
		}
		checkTimedOut(t, s, info.ID, evs, 5*time.Minute, "idle", "timed_out:idle")
		if time.Since(start) < 5*time.Minute {
			t.Errorf("stopped before its idle timeout")
		}
	})
}

func TestTimeoutSpecs(t *testing.T) {
	t.Parallel()
	s := newFake(t, &sessiontest.Launcher{}, Config{})
	batch := spec("make")
	batch.IdleTimeout = time.Minute
	if _, err := s.Start(t.Context(), "o", "batch-idle", batch); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "interactive") {
		t.Errorf("an idle timeout on a batch execution: %v, want ErrInvalidSpec naming interactive", err)
	}
	// Equal starts stay equal with the defaults filled in.
	a, err := s.Start(t.Context(), "o", "sh", shell())
	if err != nil {
		t.Fatal(err)
	}
	sp := shell()
	sp.Interactive, sp.IdleTimeout = true, DefaultIdleTimeout
	if b, err := s.Start(t.Context(), "o", "sh", sp); err != nil || b.Incarnation != a.Incarnation {
		t.Errorf("a start with the defaults spelled out: %v, incarnation %s vs %s", err, b.Incarnation, a.Incarnation)
	}
}

func cmpOr(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}
