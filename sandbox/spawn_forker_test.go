//go:build linux

package sandbox

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/internal/cgroup/v1thread"
	"github.com/termgate/termgate/sandbox/internal/forker"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// stuckMover claims to enter every directory and, while stuck, fails to
// leave; it moves no thread.
type stuckMover struct{ stuck atomic.Bool }

func (m *stuckMover) Enter(dirs []string) []string { return dirs }

func (m *stuckMover) Return([]string) error {
	if m.stuck.Load() {
		return errors.New("cannot leave")
	}
	return nil
}

// forkerSpawner spawns through one forker.
type forkerSpawner struct{ f *forker.Forker }

func (s forkerSpawner) spawn(_ context.Context, req spawnRequest) (spawned, error) {
	return spawnOn(s.f, req)
}

// testForkerIdle is the test forkers' Idle.
const testForkerIdle = 10 * time.Millisecond

// TestForkerStranded: when the forker's thread cannot leave an
// execution's directories, the spawn still succeeds, forked on the
// caller's thread and born in none of them (the launcher moves it); the
// forker forks nothing until its thread left, then enters again, and
// ends once idle.
func TestForkerStranded(t *testing.T) {
	t.Parallel()
	l := needLauncher(t)
	g := v1Group(t, l)
	m := &stuckMover{}
	m.stuck.Store(true)
	f := forker.New(forker.Config{Mover: func() (v1thread.Mover, error) { return m, nil }, Idle: testForkerIdle})
	s := forkerSpawner{f}
	req := spawnRequest{key: "stranded", cgroup: g.Unified(), enter: g.V1(), cgroups: g.Dirs()}
	_, child := spawnCat(t, s, req)
	if born := child.born(); !slices.Equal(born, []string{g.Unified()}) {
		t.Errorf("spawn from a stranded forker says it was born in %q, want only %q", born, g.Unified())
	}
	_, child = spawnCat(t, s, req)
	if born := child.born(); !slices.Equal(born, []string{g.Unified()}) {
		t.Errorf("second spawn from a stranded forker: born in %q", born)
	}
	m.stuck.Store(false)
	_, child = spawnCat(t, s, req)
	if born := child.born(); !sameSet(born, g.Dirs()) {
		t.Errorf("spawn once the forker left says it was born in %q, want %q", born, g.Dirs())
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if !f.Running() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the forker still runs 5 s after its last job")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestForkerLean: a spawn that lists what it resolves is forked from a
// lean mount namespace, without /sys; one that does not, from the host's.
func TestForkerLean(t *testing.T) {
	t.Parallel()
	sandboxtest.NeedSysMounted(t)
	s := forkerSpawner{forker.New(forker.Config{Mover: func() (v1thread.Mover, error) { return nil, errors.New("none") }, Idle: testForkerIdle, Lean: true})}
	cat := []string{"cat", "/proc/self/mountinfo"}
	out, _ := spawnCat(t, s, spawnRequest{key: "lean", args: cat, resolves: []string{"/usr/bin/cat", "/proc/self"}})
	if strings.Contains(out, " /sys ") || !strings.Contains(out, " /proc ") {
		t.Errorf("a lean spawn sees these mounts:\n%s", out)
	}
	out, _ = spawnCat(t, s, spawnRequest{key: "host", args: cat})
	if !strings.Contains(out, " /sys ") {
		t.Errorf("a spawn that is not lean sees these mounts:\n%s", out)
	}
	// Its root and working directory are its own since the lean fork: the
	// thread stays locked, never handed back to the runtime. Parked, it
	// holds no lean copy: on a host whose mounts are private, one would
	// keep busy what the host unmounted.
	time.Sleep(10 * testForkerIdle)
	running, copies := s.f.Running(), s.f.LeanCopies()
	if !running {
		t.Error("the forker ended after a lean fork, handing its thread back")
	}
	if copies != 0 {
		t.Errorf("the parked forker holds %d lean copies", copies)
	}
}
