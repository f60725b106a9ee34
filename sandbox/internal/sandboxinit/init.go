//go:build linux

// Package sandboxinit is the one program between bwrap and the command: the
// running binary itself, bound read-only into the sandbox at Path. bwrap
// runs it with no variable of the client's, so nothing a client chose
// reaches any program but the command: LD_PRELOAD and friends can neither
// turn a ceiling off nor run before the command. Its instructions come on
// the control socket at ControlFD, never argv, which the host's process
// table shows for bwrap.
//
// It leads a new session with the terminal (with a PTY), enters the
// working directory from inside the sandbox, waits for the launcher's go
// when asked (the launcher bounds the sandbox's terminals meanwhile), puts
// the command in a Landlock domain, sets the rlimits and execs the command
// from its first thread.
//
// A binary becomes the init when bwrap starts it as Path. Built with cgo, a
// C constructor does all of it before the Go runtime starts (fast_cgo.go):
// every sandbox start pays for what runs before the exec, and the runtime
// with the package initialisation of a large binary is about 3 ms. The
// package's init function, the same steps in Go, runs what the constructor
// leaves to it (a configuration only Decode reads), and everything in a
// build without cgo; it never returns. It imports only the standard
// library's smallest packages, so that it runs before most of a large
// binary's package initialisation.
package sandboxinit

import (
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// Path is where the sandbox sees the init.
const Path = "/run/termgate/init"

// ControlFD is the init's end of its control socket, a seqpacket socket.
const ControlFD = 3

// Exit codes of the init when it cannot run the command, as a shell's.
const (
	ExitNotFound = 127
	ExitFailed   = 126
)

// Messages on the control socket. The launcher sends one Config, then Go
// when the Config asked to hold. The init sends Ready when it holds, and
// ErrPrefix or NotFoundPrefix and a message when it gives up.
const (
	Ready          = "ready"
	Go             = "go"
	ErrPrefix      = "error:"
	NotFoundPrefix = "error:not-found:"
)

func init() {
	if len(os.Args) < 2 || os.Args[0] != Path {
		return
	}
	// Exec from the process's first thread, where package initialisation
	// runs: from any other, the kernel kills the first on the way, and the
	// process events report that as the exit of the command.
	runtime.LockOSThread()
	os.Exit(run(os.Args[1:]))
}

// run becomes the command and returns only on failure.
func run(command []string) int {
	cfg, err := readConfig()
	if err != nil {
		return fail(err, ExitFailed)
	}
	if err := enterSession(cfg); err != nil {
		return fail(err, ExitFailed)
	}
	if cfg.Hold {
		if err := holdForGo(); err != nil {
			return fail(err, ExitFailed)
		}
	}
	path, err := lookCommand(command[0], cfg.Env)
	if err != nil {
		return fail(err, ExitNotFound)
	}
	if cfg.Landlock {
		if err := enterLandlockDomain(); err != nil {
			return fail(err, ExitFailed)
		}
	}
	err = execCommand(path, command, cfg)
	code := ExitFailed
	if errors.Is(err, syscall.ENOENT) {
		code = ExitNotFound
	}
	return fail(errors.New("exec "+command[0]+": "+err.Error()), code)
}

// fail tells the launcher why the command never ran, or the terminal when
// the launcher cannot hear.
func fail(err error, code int) int {
	prefix := ErrPrefix
	if code == ExitNotFound {
		prefix = NotFoundPrefix
	}
	if _, werr := syscall.Write(ControlFD, []byte(prefix+err.Error())); werr != nil {
		os.Stderr.WriteString("termgate-init: " + err.Error() + "\n")
	}
	return code
}

func readConfig() (Config, error) {
	buf := make([]byte, MaxConfig+1)
	n, err := syscall.Read(ControlFD, buf)
	if err != nil {
		return Config{}, errors.New("read configuration: " + err.Error())
	}
	return Decode(buf[:max(n, 0)])
}

// enterSession makes the command a session leader with the terminal as its
// controlling tty, so job control works and the terminal's signals reach
// the command, never bwrap; then enters the working directory, from inside
// the sandbox, where no path leads out.
func enterSession(cfg Config) error {
	if cfg.Terminal {
		if _, err := syscall.Setsid(); err != nil {
			return errors.New("new session: " + err.Error())
		}
		if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, 0, syscall.TIOCSCTTY, 0); errno != 0 {
			return errors.New("controlling terminal: " + errno.Error())
		}
	}
	if err := syscall.Chdir(cfg.Cwd); err != nil {
		return errors.New("cannot change directory to " + cfg.Cwd + ": " + err.Error())
	}
	return nil
}

func holdForGo() error {
	if _, err := syscall.Write(ControlFD, []byte(Ready)); err != nil {
		return errors.New("report ready: " + err.Error())
	}
	buf := make([]byte, 16)
	n, err := syscall.Read(ControlFD, buf)
	if err != nil || n <= 0 || string(buf[:n]) != Go {
		return errors.New("the launcher did not let the command start")
	}
	return nil
}

// lookCommand finds name as execvp would, in the command's own PATH.
func lookCommand(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	search := "/usr/bin:/bin" // execvp's, without PATH
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
		var st syscall.Stat_t
		if syscall.Stat(p, &st) != nil || st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			continue
		}
		if syscall.Access(p, 1) == nil { // X_OK
			return p, nil
		}
		denied = true
	}
	if denied {
		return "", errors.New(name + ": permission denied")
	}
	return "", errors.New(name + ": command not found")
}

// Landlock's ABI, numbered alike on every architecture (linux/landlock.h).
const (
	sysLandlockCreateRuleset = 444
	sysLandlockRestrictSelf  = 446
	landlockRulesetVersion   = 1 << 0
	landlockMakeChar         = 1 << 6
	landlockMakeBlock        = 1 << 11
)

// LandlockAvailable reports whether the kernel has Landlock (ABI 1 or later).
func LandlockAvailable() bool {
	abi, _, errno := syscall.Syscall(sysLandlockCreateRuleset, 0, 0, landlockRulesetVersion)
	return errno == 0 && abi >= 1
}

// enterLandlockDomain puts this thread, and so the command it becomes, in
// a Landlock domain of its own. The domain denies only what no sandbox can
// do anyway (making device nodes needs CAP_MKNOD on the host); what it
// brings is Landlock's ptrace rule: no process in it can trace, or open
// the memory of, a process outside it, which bwrap's pid 1 is. Processes
// the command starts inherit the domain and stay open to its debuggers.
func enterLandlockDomain() error {
	handled := uint64(landlockMakeChar | landlockMakeBlock)
	// Only handled_access_fs, the whole struct of ABI 1: later kernels
	// read their extra fields as zero.
	fd, _, errno := syscall.Syscall(sysLandlockCreateRuleset, uintptr(unsafe.Pointer(&handled)), unsafe.Sizeof(handled), 0)
	if errno != 0 {
		return errors.New("landlock ruleset: " + errno.Error())
	}
	defer syscall.Close(int(fd))
	if _, _, errno := syscall.Syscall(sysLandlockRestrictSelf, fd, 0, 0); errno != 0 {
		return errors.New("landlock domain: " + errno.Error())
	}
	return nil
}

// commandOpenFiles is the soft open-files limit a command gets when the
// policy sets none: the Go runtime of the init raised its own to the hard
// limit, and programs that still use select(2) expect FD_SETSIZE.
const commandOpenFiles = 1024

// execCommand sets the rlimits and execs, allocating nothing in between:
// an address-space ceiling far below what the Go runtime reserved would
// make any allocation after it fail.
func execCommand(path string, argv []string, cfg Config) error {
	argv0, err := syscall.BytePtrFromString(path)
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
	if tid, pid := syscall.Gettid(), syscall.Getpid(); tid != pid {
		return errors.New("exec from thread " + strconv.Itoa(tid) + ", not the first thread " + strconv.Itoa(pid))
	}
	syscall.CloseOnExec(ControlFD)
	resetIgnoredSignals()
	if err := restoreOpenFiles(cfg.Rlimits); err != nil {
		return err
	}
	for _, r := range cfg.Rlimits {
		lim := syscall.Rlimit{Cur: r.Value, Max: r.Value}
		if err := syscall.Setrlimit(r.Resource, &lim); err != nil {
			return errors.New("set rlimit " + strconv.Itoa(r.Resource) + ": " + err.Error())
		}
	}
	_, _, errno := syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(argv0)),
		uintptr(unsafe.Pointer(&args[0])), uintptr(unsafe.Pointer(&env[0])))
	return errno
}

// restoreOpenFiles lowers the soft open-files limit the Go runtime raised,
// unless a ceiling replaces it anyway.
func restoreOpenFiles(limits []Rlimit) error {
	for _, r := range limits {
		if r.Resource == syscall.RLIMIT_NOFILE {
			return nil
		}
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return errors.New("read open-files limit: " + err.Error())
	}
	lim.Cur = min(lim.Max, commandOpenFiles)
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}

// cStrings returns ss as the NULL-terminated array execve takes.
func cStrings(ss []string) ([]*byte, error) {
	out := make([]*byte, len(ss)+1)
	for i, s := range ss {
		p, err := syscall.BytePtrFromString(s)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// resetIgnoredSignals gives the command the default action of every
// signal an ancestor left ignored, but SIGHUP and SIGINT (nohup's and a
// shell's background jobs' own choice). The Go runtime replaces most
// inherited SIG_IGNs with its handler, which the exec resets, but keeps
// some (glibc's reserved 32 and 33 among them); the C init does the same
// as this.
func resetIgnoredSignals() {
	for sig := uintptr(1); sig <= 64; sig++ {
		if sig == uintptr(syscall.SIGHUP) || sig == uintptr(syscall.SIGINT) || sig == uintptr(syscall.SIGKILL) || sig == uintptr(syscall.SIGSTOP) {
			continue
		}
		var old, dfl [4]uint64 // the kernel's sigaction on every architecture; all zero is SIG_DFL
		_, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, sig, 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0)
		if errno == 0 && old[0] == 1 { // SIG_IGN
			syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, sig, uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
		}
	}
}
