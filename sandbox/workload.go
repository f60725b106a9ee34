//go:build linux

package sandbox

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
)

// errNotStarted: the sandbox has not executed the command yet (bwrap or
// the init is still running).
var errNotStarted = errors.New("sandbox: command not started yet")

// workload returns the host pid of the sandboxed command: the first child
// of the sandbox's pid 1, which is bwrap's only child, once it has exec'd
// the command, so that a signal reaches the command and never bwrap's
// setup or the init. Process events tell exactly; without them, /proc does.
func (p *Process) workload() (int, error) {
	if p.track != nil && !p.track.Blind() {
		if pid, ok := p.track.WorkloadPid(); ok && p.track.ExecCount() > initExecs {
			return pid, nil
		}
		return 0, errNotStarted
	}
	if init, ok := p.sandboxInit(); ok {
		if pid, ok := firstChild(init); ok && p.runsCommand(pid) {
			return pid, nil
		}
	}
	return 0, errNotStarted
}

// sandboxInit returns the host pid of the sandbox's pid 1, bwrap's child.
func (p *Process) sandboxInit() (int, bool) {
	if p.track != nil && !p.track.Blind() {
		return p.track.InitPid()
	}
	return firstChild(p.child.pid())
}

// runsCommand reports whether pid, the sandbox's first process, has exec'd
// the command. Before that its command line is bwrap's (setting up), then
// the init's: p.argv, one longer than the command.
func (p *Process) runsCommand(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return false
	}
	argv := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	if p.bwrapArgs == nil { // adopted without its argv: known by name
		return argv[0] != "bwrap" && argv[0] != initPath
	}
	if slices.Equal(argv, p.bwrapArgs) {
		return false
	}
	n := len(argv)
	isInit := n > len(p.policy.Command) && n <= len(p.argv) && slices.Equal(argv, p.argv[len(p.argv)-n:])
	return !isInit
}

// firstChild scans /proc for the lowest pid whose parent is ppid.
func firstChild(ppid int) (int, bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	best := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || (best != 0 && pid >= best) {
			continue
		}
		if parentOf(pid) == ppid {
			best = pid
		}
	}
	return best, best != 0
}

// parentOf reads the ppid field of /proc/pid/stat; the command name may
// hold spaces and parentheses, so parse after the last ')'.
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(string(fields[1]))
	return ppid
}
