//go:build linux

package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// termgate's init is the one program between bwrap and the command. It is
// the running binary itself (a program importing this package), bound
// read-only into the sandbox at initPath. bwrap runs it with an empty
// environment, so nothing a client chose reaches any program but the
// command: LD_PRELOAD and friends cannot turn a ceiling off or run before
// the command. Its instructions come on the control socket, never argv,
// which the host's process table shows for bwrap.
//
// It enters the terminal's session, the working directory, sets the
// rlimits, waits for the launcher's go when asked (the launcher bounds the
// sandbox's terminals in between), and execs the command.

const (
	// initPath is where the sandbox sees the init.
	initPath = "/run/termgate/init"
	// initControlFD is the init's end of its control socket.
	initControlFD = 3
	// initMaxConfig bounds the configuration message: the policy's
	// environment and working directory, well below the socket's buffer.
	initMaxConfig = maxEnvBytes + 2*maxEnvVars*8 + maxPathBytes + 1024
)

// initExecs is how many execs the sandbox's first process makes before it
// runs the command: bwrap's exec of the init.
const initExecs = 1

// Exit codes of the init when it cannot run the command, as a shell's.
const (
	initExitNotFound = 127
	initExitFailed   = 126
)

// Messages on the control socket. The launcher sends one initConfig, then
// initGo when the config asked to hold. The init sends initReady when it
// holds, and initErrPrefix plus a message when it gives up.
const (
	initReady     = "ready"
	initGo        = "go"
	initErrPrefix = "error:"
	initNotFound  = "error:not-found:"
)

// initConfig is what the init is told.
type initConfig struct {
	Env      []string     `json:"env"`                // the command's whole environment
	Cwd      string       `json:"cwd"`                // entered before exec
	Terminal bool         `json:"terminal,omitempty"` // lead a new session with stdin as its terminal
	Hold     bool         `json:"hold,omitempty"`     // send initReady and wait for initGo
	Rlimits  []initRlimit `json:"rlimits,omitempty"`  // set with soft = hard just before exec
	Landlock bool         `json:"landlock,omitempty"` // put the command in a Landlock domain
}

// initRlimit is one ceiling on the command's every process.
type initRlimit struct {
	Resource int    `json:"resource"`
	Value    uint64 `json:"value"`
}

func init() {
	// The init is recognised by its path, which only bwrap gives argv[0].
	if len(os.Args) > 1 && os.Args[0] == initPath {
		// Exec from the process's first thread. From any other, the kernel
		// kills the first thread on the way, and the process events report
		// that as the exit of the sandbox's command, which then ends.
		runtime.LockOSThread()
		os.Exit(runInit(os.Args[1:]))
	}
}

// runInit runs inside the sandbox and returns only on failure.
func runInit(command []string) int {
	ctl := os.NewFile(initControlFD, "control")
	fail := func(msg string, code int) int {
		prefix := initErrPrefix
		if code == initExitNotFound {
			prefix = initNotFound
		}
		if _, err := ctl.Write([]byte(prefix + msg)); err != nil {
			fmt.Fprintln(os.Stderr, "termgate-init: "+msg)
		}
		return code
	}
	cfg, err := readInitConfig(ctl)
	if err != nil {
		return fail(err.Error(), initExitFailed)
	}
	if err := enterSession(cfg); err != nil {
		return fail(err.Error(), initExitFailed)
	}
	if cfg.Hold {
		if err := holdForGo(ctl); err != nil {
			return fail(err.Error(), initExitFailed)
		}
	}
	path, err := lookCommand(command[0], cfg.Env)
	if err != nil {
		return fail(err.Error(), initExitNotFound)
	}
	if cfg.Landlock {
		if err := enterLandlockDomain(); err != nil {
			return fail(err.Error(), initExitFailed)
		}
	}
	err = execCommand(path, command, cfg)
	code := initExitFailed
	if errors.Is(err, unix.ENOENT) {
		code = initExitNotFound
	}
	return fail(fmt.Sprintf("exec %s: %v", command[0], err), code)
}

func readInitConfig(ctl *os.File) (initConfig, error) {
	var cfg initConfig
	buf := make([]byte, initMaxConfig)
	n, err := ctl.Read(buf)
	if err != nil {
		return cfg, fmt.Errorf("read configuration: %w", err)
	}
	if err := json.Unmarshal(buf[:n], &cfg); err != nil {
		return cfg, fmt.Errorf("decode configuration: %w", err)
	}
	return cfg, nil
}

// enterSession makes the command a session leader with the terminal as its
// controlling tty, so job control works and the terminal's signals reach
// the command, never bwrap; then enters the working directory, from inside
// the sandbox, where no path leads out.
func enterSession(cfg initConfig) error {
	if cfg.Terminal {
		if _, err := unix.Setsid(); err != nil {
			return fmt.Errorf("new session: %w", err)
		}
		if err := unix.IoctlSetInt(0, unix.TIOCSCTTY, 0); err != nil {
			return fmt.Errorf("controlling terminal: %w", err)
		}
	}
	if err := unix.Chdir(cfg.Cwd); err != nil {
		return fmt.Errorf("cannot change directory to %s: %w", cfg.Cwd, err)
	}
	return nil
}

func holdForGo(ctl *os.File) error {
	if _, err := ctl.Write([]byte(initReady)); err != nil {
		return fmt.Errorf("report ready: %w", err)
	}
	buf := make([]byte, 16)
	n, err := ctl.Read(buf)
	if err != nil || string(buf[:n]) != initGo {
		return errors.New("the launcher did not let the command start")
	}
	return nil
}

// lookCommand finds name as execvp would, in the command's own PATH.
func lookCommand(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	search := DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			search = v
		}
	}
	denied := false
	for _, dir := range strings.Split(search, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + name
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFDIR {
			continue
		}
		if unix.Access(p, unix.X_OK) == nil {
			return p, nil
		}
		denied = true
	}
	if denied {
		return name, fmt.Errorf("%s: permission denied", name)
	}
	return "", fmt.Errorf("%s: command not found", name)
}

// commandOpenFiles is the soft open-files limit a command gets when the
// policy sets none: the Go runtime of the init raised its own to the hard
// limit, and programs that still use select(2) expect FD_SETSIZE.
const commandOpenFiles = 1024

// restoreOpenFiles lowers the soft open-files limit the Go runtime raised,
// unless a ceiling replaces it anyway.
func restoreOpenFiles(limits []initRlimit) error {
	for _, r := range limits {
		if r.Resource == unix.RLIMIT_NOFILE {
			return nil
		}
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("read open-files limit: %w", err)
	}
	lim.Cur = min(lim.Max, commandOpenFiles)
	return unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
}

// enterLandlockDomain puts this thread, and so the command it becomes, in
// a Landlock domain of its own. The domain denies only what no sandbox can
// do anyway (making device nodes needs CAP_MKNOD on the host); what it
// brings is Landlock's ptrace rule: no process in it can trace, or open
// the memory of, a process outside it, which bwrap's pid 1 is. Processes
// the command starts inherit the domain and stay open to its debuggers.
func enterLandlockDomain() error {
	attr := unix.LandlockRulesetAttr{Handled_access_fs: unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK | unix.LANDLOCK_ACCESS_FS_MAKE_CHAR}
	// The size of ABI 1's struct: later kernels read their extra fields as zero.
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr.Handled_access_fs), 0)
	if errno != 0 {
		return fmt.Errorf("landlock ruleset: %w", errno)
	}
	defer unix.Close(int(fd))
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Errorf("landlock domain: %w", errno)
	}
	return nil
}

// landlockAvailable reports whether the kernel has Landlock (ABI 1 or later).
func landlockAvailable() bool {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	return errno == 0 && abi >= 1
}

// cStrings returns ss as the NULL-terminated array execve takes.
func cStrings(ss []string) ([]*byte, error) {
	out := make([]*byte, len(ss)+1)
	for i, s := range ss {
		p, err := unix.BytePtrFromString(s)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// execCommand sets the rlimits and execs, allocating nothing in between:
// an address-space ceiling far below what the Go runtime reserved would
// make any allocation after it fail.
func execCommand(path string, argv []string, cfg initConfig) error {
	argv0, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	args, err := cStrings(argv)
	if err != nil {
		return err
	}
	env, err := cStrings(cfg.Env)
	if err != nil {
		return err
	}
	if tid, pid := unix.Gettid(), unix.Getpid(); tid != pid {
		return fmt.Errorf("exec from thread %d, not the first thread %d", tid, pid)
	}
	unix.CloseOnExec(initControlFD)
	if err := restoreOpenFiles(cfg.Rlimits); err != nil {
		return err
	}
	for _, r := range cfg.Rlimits {
		lim := unix.Rlimit{Cur: r.Value, Max: r.Value}
		if err := unix.Setrlimit(r.Resource, &lim); err != nil {
			return fmt.Errorf("set rlimit %d: %w", r.Resource, err)
		}
	}
	_, _, errno := unix.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(argv0)),
		uintptr(unsafe.Pointer(&args[0])), uintptr(unsafe.Pointer(&env[0])))
	return errno
}
