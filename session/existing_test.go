package session_test

import (
	"context"
	"errors"
	"testing"

	"github.com/termgate/termgate/sandbox"
	. "github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// TestExisting: Existing finds an execution started with an equal spec
// (defaults filled as Start fills them), refuses another spec as a
// conflict, never creates one, and keeps tenants apart.
func TestExisting(t *testing.T) {
	t.Parallel()
	l := &sessiontest.Launcher{Script: func(p *sessiontest.Proc) sandbox.Exit { <-p.Stopped(); return sandbox.Exit{Code: 1} }}
	s := newFake(t, l, Config{})
	started, err := s.Start(context.Background(), "acme", "job-1", untimed("/bin/sh"))
	if err != nil {
		t.Fatal(err)
	}
	other := untimed("/bin/sh", "-c", "true")
	cases := []struct {
		name, owner, id string
		spec            Spec
		want            error
	}{
		{"equal", "acme", "job-1", untimed("/bin/sh"), nil},
		{"other spec", "acme", "job-1", other, ErrConflict},
		{"unknown", "acme", "job-2", untimed("/bin/sh"), ErrNotFound},
		{"other tenant", "globex", "job-1", untimed("/bin/sh"), ErrNotFound},
		{"malformed", "acme", "no spaces", untimed("/bin/sh"), ErrInvalidID},
		{"bad spec", "acme", "job-1", Spec{Policy: sandbox.Policy{Timeout: 1}}, ErrInvalidSpec},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			info, err := s.Existing(c.owner, c.id, c.spec)
			if !errors.Is(err, c.want) {
				t.Fatalf("err %v, want %v", err, c.want)
			}
			if c.want == nil && (info.ID != started.ID || info.Incarnation != started.Incarnation) {
				t.Fatalf("info %s/%s, want %s/%s", info.ID, info.Incarnation, started.ID, started.Incarnation)
			}
		})
	}
	if n := len(l.Procs()); n != 1 {
		t.Fatalf("%d processes started, want 1: Existing created one", n)
	}
	if _, err := s.Get("acme", "job-2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("job-2 after Existing: %v, want not found", err)
	}
}
