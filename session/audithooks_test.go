package session_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	. "github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// TestOnEnd: the hook sees every execution end once, with its result and
// the attributes its start was given; nil removes it.
func TestOnEnd(t *testing.T) {
	t.Parallel()
	s := newFake(t, &sessiontest.Launcher{}, Config{})
	var mu sync.Mutex
	var got []Ended
	s.OnEnd(func(e Ended) { mu.Lock(); got = append(got, e); mu.Unlock() })
	ctx := WithLogAttrs(context.Background(), "subject", "alice", "remote_addr", "127.0.0.1:1")
	for _, id := range []string{"one", "two"} {
		if _, err := s.Start(ctx, "acme", id, untimed("/bin/true")); err != nil {
			t.Fatal(err)
		}
	}
	sandboxtest.Eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= 2 })
	s.OnEnd(nil)
	if _, err := s.Start(ctx, "acme", "three", untimed("/bin/true")); err != nil {
		t.Fatal(err)
	}
	s.Wait(t.Context(), "acme", "three", 1<<60, 10*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0].Info.ID == got[1].Info.ID {
		t.Fatalf("ended %+v: want one and two, once each", got)
	}
	for _, e := range got {
		if e.Info.Result == nil || e.Info.Owner != "acme" || len(e.Attrs) != 4 || e.Attrs[1] != "alice" {
			t.Errorf("ended %+v: want the result, the owner and the start's attributes", e)
		}
	}
}

// TestHeldByOther: true only for an ID another owner holds.
func TestHeldByOther(t *testing.T) {
	t.Parallel()
	s := newFake(t, &sessiontest.Launcher{}, Config{})
	if _, err := s.Start(context.Background(), "acme", "job", untimed("/bin/true")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		owner, id string
		want      bool
	}{{"globex", "job", true}, {"acme", "job", false}, {"globex", "other", false}} {
		if got := s.HeldByOther(c.owner, c.id); got != c.want {
			t.Errorf("HeldByOther(%q, %q) = %v, want %v", c.owner, c.id, got, c.want)
		}
	}
}
