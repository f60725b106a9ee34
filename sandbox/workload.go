package sandbox

import (
	"bytes"
	"errors"
	"os"
	"strconv"
)

// errNotStarted: the sandbox has not executed the command yet (bwrap or a
// helper before it is still running).
var errNotStarted = errors.New("sandbox: command not started yet")

// workload returns the host pid of the sandboxed command: the first child
// of the sandbox's pid 1, which is bwrap's only child. Process events know
// it exactly, and know when the helpers before the command have exec'd into
// it, so that a signal reaches the command and not a helper; without them,
// /proc is searched.
func (p *Process) workload() (int, error) {
	if p.track != nil {
		if pid, ok := p.track.workloadPid(); ok && p.track.execCount() > p.helpers {
			return pid, nil
		}
		return 0, errNotStarted
	}
	init, ok := p.sandboxInit()
	if ok {
		if pid, ok := firstChild(init); ok {
			return pid, nil
		}
	}
	return 0, errNotStarted
}

// sandboxInit returns the host pid of the sandbox's pid 1, bwrap's child.
func (p *Process) sandboxInit() (int, bool) {
	if p.track != nil {
		return p.track.initPid()
	}
	return firstChild(p.cmd.Process.Pid)
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
