//go:build linux

package sandbox

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/termgate/termgate/sandbox/internal/sandboxinit"
)

var testLayout = hostLayout{
	links: map[string]string{"/bin": "usr/bin", "/lib": "usr/lib", "/lib64": "usr/lib64", "/sbin": "usr/sbin"},
	etc: map[string]etcEntry{"/etc/ld.so.cache": {}, "/etc/localtime": {link: "/usr/share/zoneinfo/Etc/UTC"},
		"/etc/ssl/certs": {}, "/etc/services": {copy: true}},
	hostNet: map[string][]byte{"/etc/resolv.conf": []byte("nameserver 127.0.0.53\n")},
}

func testPlan(t *testing.T, p Policy) plan {
	t.Helper()
	if p.Workspace == "" {
		p.Workspace = "/srv/ws/tenant"
	}
	p = p.Normalize()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return buildPlan(p, testLayout, []byte{1, 2, 3, 4, 5, 6, 7, 8})
}

// hasSeq reports whether seq appears contiguously in args.
func hasSeq(args []string, seq ...string) bool {
	for i := 0; i+len(seq) <= len(args); i++ {
		if slices.Equal(args[i:i+len(seq)], seq) {
			return true
		}
	}
	return false
}

func TestPlanDefaults(t *testing.T) {
	t.Parallel()
	pl := testPlan(t, Policy{Command: []string{"ls", "-l"}})
	for _, seq := range [][]string{
		{"--unshare-user", "--disable-userns"}, {"--unshare-pid"}, {"--unshare-ipc"}, {"--unshare-cgroup"},
		{"--unshare-uts", "--hostname", "sandbox"}, {"--unshare-net"}, {"--die-with-parent"},
		{"--cap-drop", "ALL"}, {"--new-session"}, {"--ro-bind", "/usr", "/usr"}, {"--symlink", "usr/bin", "/bin"},
		{"--symlink", "/usr/share/zoneinfo/Etc/UTC", "/etc/localtime"}, {"--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"},
		{"--dev", "/dev"}, {"--size", "67108864", "--tmpfs", "/tmp"}, {"--size", "67108864", "--tmpfs", "/run"},
		{"--perms", "0444", "--file", "5", "/etc/services"},
		{"--bind-fd", "10", "/workspace"}, {"--remount-ro", "/", "--chdir", "/workspace"},
		{"--seccomp", "12", "--clearenv", "--setenv", "GOMAXPROCS", "1"},
	} {
		if !hasSeq(pl.opts, seq...) {
			t.Errorf("options lack %q:\n%q", seq, pl.opts)
		}
	}
	for _, absent := range []string{"--proc", "/etc/resolv.conf", "--share-net", "PATH"} {
		if slices.Contains(pl.opts, absent) {
			t.Errorf("options contain %q", absent)
		}
	}
	if want := []string{"--", initPath, "ls", "-l"}; !slices.Equal(pl.argv, want) {
		t.Errorf("argv = %q, want %q", pl.argv, want)
	}
	want := sandboxinit.Config{Env: []string{"PATH=" + DefaultPath}, Cwd: "/workspace"}
	if !reflect.DeepEqual(pl.init, want) {
		t.Errorf("init config = %+v, want %+v", pl.init, want)
	}
}

func TestPlanKeepsHostPathsOutOfArguments(t *testing.T) {
	t.Parallel()
	pl := testPlan(t, Policy{Command: []string{"true"}, Binds: []Bind{{Source: "/srv/data", Dest: "/data"}}})
	all := strings.Join(append(pl.opts, pl.argv...), " ")
	if strings.Contains(all, "/srv/") {
		t.Errorf("host path in bwrap's arguments: %s", all)
	}
	if !slices.ContainsFunc(pl.files, func(f planFile) bool { return f.kind == fileBind && f.path == "/srv/data" }) {
		t.Errorf("bind source not passed as a descriptor: %+v", pl.files)
	}
}

func TestPlanMountsBindsByDepth(t *testing.T) {
	t.Parallel()
	pl := testPlan(t, Policy{Command: []string{"true"}, Binds: []Bind{
		{Source: "/srv/a/deep", Dest: "/workspace/x/ro"},
		{Source: "/srv/cache", Dest: "/cache", Writable: true},
	}})
	var dests []string
	for i, o := range pl.opts {
		if (o == "--bind-fd" || o == "--ro-bind-fd") && pl.opts[i+2] != initPath {
			dests = append(dests, o+" "+pl.opts[i+2])
		}
	}
	want := []string{"--bind-fd /workspace", "--bind-fd /cache", "--ro-bind-fd /workspace/x/ro"}
	if !slices.Equal(dests, want) {
		t.Errorf("bind order %q, want %q", dests, want)
	}
}

func TestPlanModes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		policy   Policy
		has      [][]string
		lacks    []string
		wantArgv []string
	}{
		{"pty: the init leads a session, not bwrap", Policy{Command: []string{"bash"}, TTY: &WindowSize{Rows: 24, Cols: 80}},
			nil, []string{"--new-session"}, []string{"--", initPath, "bash"}},
		{"the command's environment is the init's to give", Policy{Command: []string{"make"}, Env: map[string]string{"LD_PRELOAD": "/x.so"}},
			[][]string{{"--clearenv", "--setenv", "GOMAXPROCS", "1"}}, []string{"LD_PRELOAD"}, []string{"--", initPath, "make"}},
		{"dev is read-only but for shm, terminals hidden", Policy{Command: []string{"x"}},
			[][]string{{"--size", "67108864", "--tmpfs", "/dev/shm"}, {"--tmpfs", "/dev/pts", "--remount-ro", "/dev/pts", "--remount-ro", "/dev"}}, nil, nil},
		{"terminals of its own keep devpts", Policy{Command: []string{"x"}, PTYs: 4},
			[][]string{{"--remount-ro", "/dev"}}, []string{"/dev/pts"}, nil},
		{"host network", Policy{Command: []string{"x"}, Network: NetworkHost},
			[][]string{{"--file"}}, []string{"--unshare-net"}, nil},
		{"private proc", Policy{Command: []string{"x"}, Proc: ProcPrivate},
			[][]string{{"--proc", "/proc"}}, nil, nil},
		{"self-exe", Policy{Command: []string{"x"}, Proc: ProcSelfExe, SelfExe: "/opt/app"},
			[][]string{{"--symlink", "/opt/app", "/proc/self/exe"}}, []string{"--proc"}, nil},
		{"read-only workspace", Policy{Command: []string{"x"}, WorkspaceReadOnly: true},
			[][]string{{"--ro-bind-fd", "10", "/workspace"}}, []string{"--bind-fd"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pl := testPlan(t, c.policy)
			for _, seq := range c.has {
				if !hasSeq(pl.opts, seq...) {
					t.Errorf("options lack %q: %q", seq, pl.opts)
				}
			}
			for _, a := range c.lacks {
				if slices.Contains(pl.opts, a) {
					t.Errorf("options contain %q", a)
				}
			}
			if c.wantArgv != nil && !slices.Equal(pl.argv, c.wantArgv) {
				t.Errorf("argv = %q, want %q", pl.argv, c.wantArgv)
			}
		})
	}
}

func TestPlanHostNetworkCopiesResolver(t *testing.T) {
	t.Parallel()
	pl := testPlan(t, Policy{Command: []string{"x"}, Network: NetworkHost})
	found := false
	for i, o := range pl.opts {
		if o == "--file" && pl.opts[i+2] == "/etc/resolv.conf" {
			found = true
		}
	}
	if !found {
		t.Errorf("no resolv.conf with host network: %q", pl.opts)
	}
}

func TestEncodeArgs(t *testing.T) {
	t.Parallel()
	if got := string(encodeArgs([]string{"--a", "b c", ""})); got != "--a\x00b c\x00\x00" {
		t.Errorf("encodeArgs = %q", got)
	}
}
