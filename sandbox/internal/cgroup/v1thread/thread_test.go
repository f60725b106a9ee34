//go:build linux

package v1thread

import (
	"errors"
	"slices"
	"testing"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

func TestMain(m *testing.M) { sandboxtest.Main(m) }

// fakeMover enters what it is told it can and fails to return while
// stuck is set.
type fakeMover struct {
	can     []string
	stuck   bool
	inside  []string
	returns int
}

func (f *fakeMover) Enter(dirs []string) []string {
	var in []string
	for _, d := range dirs {
		if slices.Contains(f.can, d) {
			in = append(in, d)
		}
	}
	f.inside = in
	return in
}

func (f *fakeMover) Return([]string) error {
	f.returns++
	if f.stuck {
		return errors.New("stuck")
	}
	f.inside = nil
	return nil
}

// TestThreadFork: what a fork reports, and where the thread is after it.
func TestThreadFork(t *testing.T) {
	errStart := errors.New("start failed")
	for _, tc := range []struct {
		name      string
		can       []string
		stuck     bool
		failFirst bool // the start inside fails, the one from home succeeds
		want      []string
		wantErr   error
		starts    int
		killed    bool
	}{
		{name: "all entered", can: []string{"a", "b"}, want: []string{"a", "b"}, starts: 1},
		{name: "one not entered", can: []string{"b"}, want: []string{"b"}, starts: 1},
		{name: "none entered", starts: 1},
		{name: "start fails inside", can: []string{"a", "b"}, failFirst: true, starts: 2},
		{name: "cannot leave", can: []string{"a"}, stuck: true, wantErr: ErrStranded, starts: 1, killed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &fakeMover{can: tc.can, stuck: tc.stuck}
			th := NewThread(m)
			starts, killed := 0, false
			got, err := th.Fork([]string{"a", "b"}, func() (func(), error) {
				starts++
				if tc.failFirst && starts == 1 {
					if len(m.inside) == 0 {
						t.Error("the first start ran outside")
					}
					return nil, errStart
				}
				if tc.failFirst && len(m.inside) != 0 {
					t.Errorf("the retry ran inside %q", m.inside)
				}
				return func() { killed = true }, nil
			})
			if !errors.Is(err, tc.wantErr) || !slices.Equal(got, tc.want) || starts != tc.starts || killed != tc.killed {
				t.Errorf("Fork: %q, %v (starts %d, killed %v), want %q, %v (starts %d, killed %v)",
					got, err, starts, killed, tc.want, tc.wantErr, tc.starts, tc.killed)
			}
			if !tc.stuck && len(m.inside) != 0 {
				t.Errorf("the thread is still in %q", m.inside)
			}
			if th.Stranded() != tc.stuck {
				t.Errorf("stranded %v, want %v", th.Stranded(), tc.stuck)
			}
		})
	}
}

// TestThreadStranded: a thread that could not leave forks nothing until
// a try to leave succeeds.
func TestThreadStranded(t *testing.T) {
	m := &fakeMover{can: []string{"a"}, stuck: true}
	th := NewThread(m)
	ok := func() (func(), error) { return func() {}, nil }
	if _, err := th.Fork([]string{"a"}, ok); !errors.Is(err, ErrStranded) {
		t.Fatalf("Fork stuck: %v", err)
	}
	started := false
	if _, err := th.Fork(nil, func() (func(), error) { started = true; return func() {}, nil }); !errors.Is(err, ErrStranded) || started {
		t.Errorf("Fork while stranded: %v, started %v", err, started)
	}
	m.stuck = false
	if got, err := th.Fork([]string{"a"}, ok); err != nil || !slices.Equal(got, []string{"a"}) || th.Stranded() {
		t.Errorf("Fork once it could leave: %q, %v, stranded %v", got, err, th.Stranded())
	}
}

// TestHomesOf: the thread's home in each v1 hierarchy, from mountinfo and
// /proc/thread-self/cgroup, co-mounted and bind-mounted ones included.
func TestHomesOf(t *testing.T) {
	list := []mount{
		{point: "/sys/fs/cgroup/memory", root: "/", ctls: []string{"rw", "memory"}},
		{point: "/sys/fs/cgroup/cpu,cpuacct", root: "/", ctls: []string{"rw", "cpu", "cpuacct"}},
		{point: "/sys/fs/cgroup/pids", root: "/ns", ctls: []string{"rw", "pids"}},
		{point: "/sys/fs/cgroup/freezer", root: "/other", ctls: []string{"rw", "freezer"}},
	}
	h := homesOf(list, "5:memory:/user.slice\n4:cpu,cpuacct:/\n3:pids:/ns/x\n2:freezer:/elsewhere\n0::/init.scope\n")
	for dir, want := range map[string]string{
		"/sys/fs/cgroup/memory/termgate/e":      "/sys/fs/cgroup/memory/user.slice",
		"/sys/fs/cgroup/cpu,cpuacct/termgate/e": "/sys/fs/cgroup/cpu,cpuacct",
		"/sys/fs/cgroup/pids/termgate/e":        "/sys/fs/cgroup/pids/x",
		"/sys/fs/cgroup/freezer/termgate/e":     "", // outside its mounted root
		"/sys/fs/cgroup/memoryx/e":              "",
		"/sys/fs/cgroup/memory":                 "",
	} {
		if got, _ := h.home(dir); got != want {
			t.Errorf("home of %s: %q, want %q", dir, got, want)
		}
	}
}
