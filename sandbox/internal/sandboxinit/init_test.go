//go:build linux

package sandboxinit

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// startInit runs this test binary as the init of command, with cfg
// waiting on its control socket and env as the init's own environment.
// It returns the init's stderr, its exit code and what it said on the
// control socket.
func startInit(t *testing.T, cfg []byte, env []string, command ...string) (stderr string, code int, said string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := controlSocket(t, cfg)
	var errBuf bytes.Buffer
	cmd := &exec.Cmd{Path: exe, Args: append([]string{Path}, command...), Env: env, Stderr: &errBuf, ExtraFiles: []*os.File{theirs}}
	err = cmd.Run()
	theirs.Close()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	unix.SetNonblock(int(ours.Fd()), true)
	buf := make([]byte, 4096)
	n, _ := ours.Read(buf)
	return errBuf.String(), cmd.ProcessState.ExitCode(), string(buf[:max(n, 0)])
}

// controlSocket returns the two ends of an init's control socket, cfg
// waiting on ours; ours is closed when the test ends, theirs is the
// caller's to close once the init has it.
func controlSocket(t *testing.T, cfg []byte) (ours, theirs *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs = os.NewFile(uintptr(fds[0]), "ctl"), os.NewFile(uintptr(fds[1]), "ctl-child")
	t.Cleanup(func() { ours.Close() })
	if _, err := ours.Write(cfg); err != nil {
		t.Fatal(err)
	}
	return ours, theirs
}

func encode(t *testing.T, c Config) []byte {
	t.Helper()
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestInitRunsBeforeTheGoRuntime: with cgo, the init execs the command
// before the Go runtime starts, so the runtime's init trace never prints;
// what the fast path cannot read exactly as Decode, the Go init still
// reads and decides.
func TestInitRunsBeforeTheGoRuntime(t *testing.T) {
	t.Parallel()
	if !cgoInit {
		t.Skip("built without cgo: the Go init is the only one")
	}
	trace := []string{"GODEBUG=inittrace=1"}
	for _, tc := range []struct {
		name   string
		cfg    []byte
		traced bool
	}{
		{"common", encode(t, Config{Cwd: "/", Env: []string{"PATH=/usr/bin:/bin"}}), false},
		{"rlimits", encode(t, Config{Cwd: "/", Rlimits: []Rlimit{{Resource: unix.RLIMIT_FSIZE, Value: 1 << 20}}}), false},
		{"spelled as only Decode reads", []byte("cwd\x00/\x00terminal\x00F\x00"), true},
		{"refused", []byte("cwd\x00/\x00colour\x00red\x00"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stderr, _, _ := startInit(t, tc.cfg, trace, "/bin/true")
			if got := strings.Contains(stderr, "init runtime @"); got != tc.traced {
				t.Fatalf("Go runtime ran: %v, want %v; stderr:\n%s", got, tc.traced, stderr)
			}
		})
	}
}

// TestInitFailures: the init's refusals, whichever init ran, with the
// codes and messages the launcher reports.
func TestInitFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cfg     Config
		command []string
		code    int
		said    string
	}{
		{"ok", Config{Cwd: "/"}, []string{"/bin/true"}, 0, ""},
		{"command exit", Config{Cwd: "/"}, []string{"/bin/false"}, 1, ""},
		{"not found", Config{Cwd: "/", Env: []string{"PATH=/nonexistent"}}, []string{"no-such-command"}, ExitNotFound, NotFoundPrefix + "no-such-command: command not found"},
		{"found in PATH", Config{Cwd: "/", Env: []string{"PATH=/nonexistent:/usr/bin"}}, []string{"true"}, 0, ""},
		{"not executable", Config{Cwd: "/", Env: []string{"PATH=/etc"}}, []string{"passwd"}, ExitNotFound, NotFoundPrefix + "passwd: permission denied"},
		{"missing path", Config{Cwd: "/"}, []string{"/no/such/command"}, ExitNotFound, NotFoundPrefix + "exec /no/such/command: no such file or directory"},
		{"missing cwd", Config{Cwd: "/no/such/dir"}, []string{"/bin/true"}, ExitFailed, ErrPrefix + "cannot change directory to /no/such/dir: no such file or directory"},
		{"no terminal", Config{Cwd: "/", Terminal: true}, []string{"/bin/true"}, ExitFailed, ErrPrefix + "controlling terminal: inappropriate ioctl for device"},
		{"bad rlimit", Config{Cwd: "/", Rlimits: []Rlimit{{Resource: 9999, Value: 1}}}, []string{"/bin/true"}, ExitFailed, ErrPrefix + "exec /bin/true: set rlimit 9999: invalid argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, code, said := startInit(t, encode(t, tc.cfg), nil, tc.command...)
			if code != tc.code || said != tc.said {
				t.Fatalf("exit %d, said %q; want %d, %q", code, said, tc.code, tc.said)
			}
		})
	}
}

// TestInitSignals: the command gets no ignored signal from the init's
// parent but SIGHUP and SIGINT, which the Go runtime keeps ignored too.
func TestInitSignals(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	_, theirs := controlSocket(t, encode(t, Config{Cwd: "/"}))
	// This test binary ignores the two signals glibc reserves (32 and 33,
	// which glibc's sigaction will not touch; a parent may leave them
	// ignored) and execs a shell that ignores TERM, HUP and USR1, then
	// execs the init as Path, which execs grep.
	script := `trap "" TERM HUP USR1; exec -a ` + Path + ` "$0" /bin/grep SigIgn /proc/self/status`
	cmd := exec.Command(exe, "-c", script, exe)
	cmd.Env = append(os.Environ(), ignoreReservedEnv+"=1")
	cmd.ExtraFiles = []*os.File{theirs}
	out, err := cmd.CombinedOutput()
	theirs.Close()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	const hup = 1 << (unix.SIGHUP - 1)
	if got := strings.TrimSpace(strings.TrimPrefix(string(out), "SigIgn:")); got != fmt.Sprintf("%016x", hup) {
		t.Fatalf("command ignores %s, want only SIGHUP (%016x)", got, hup)
	}
}

// ignoreReservedEnv makes this test binary (TestMain) ignore signals 32
// and 33 and exec /bin/bash with its arguments.
const ignoreReservedEnv = "TERMGATE_TEST_IGNORE_RESERVED"

func TestMain(m *testing.M) {
	if os.Getenv(ignoreReservedEnv) == "1" {
		ign := [4]uint64{1} // SIG_IGN, no flags, an empty mask
		for _, sig := range []uintptr{32, 33} {
			if _, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, sig, uintptr(unsafe.Pointer(&ign)), 0, 8, 0, 0); errno != 0 {
				fmt.Fprintln(os.Stderr, "ignore signal", sig, errno)
				os.Exit(2)
			}
		}
		os.Unsetenv(ignoreReservedEnv)
		err := unix.Exec("/bin/bash", append([]string{"bash"}, os.Args[1:]...), os.Environ())
		fmt.Fprintln(os.Stderr, "exec bash:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}
