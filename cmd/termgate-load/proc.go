//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc/PID/stat's CPU times (USER_HZ).
const clockTick = 10 * time.Millisecond

// statFields are the fields of /proc/PID/stat after the command's ")":
// state is index 0, ppid 1, utime 11, stime 12, cutime 13, cstime 14.
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	return f, nil
}

// ticks sums the given fields of pid's stat; a process gone counts 0.
func ticks(pid int, fields ...int) int64 {
	f, err := statFields(pid)
	if err != nil {
		return 0
	}
	var n int64
	for _, i := range fields {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		n += v
	}
	return n
}

// ownCPU is the CPU time of pid's threads, live and exited.
func ownCPU(pid int) time.Duration { return time.Duration(ticks(pid, 11, 12)) * clockTick }

// shellsCPU is the CPU time the shells cost, live or ended: serve's and
// the keeper's own, and that of every process in the executions'
// cgroups under parent. The cgroups count what the process tree cannot:
// when a sandbox is killed, its outer bwrap may die before it reaps the
// sandbox's pid 1, which is then reparented out of the tree, and its
// time, the shell's included, would not show. ok is false on a host
// without cgroup2, where the figure is the tree's (treeCPU).
func shellsCPU(pid, keeper int, parent string) (d time.Duration, ok bool) {
	if cg, ok := groupCPU(parent); ok {
		return ownCPU(pid) + ownCPU(keeper) + cg, true
	}
	return treeCPU(pid), false
}

// groupCPU is the CPU time used in the cgroup2 directory parent and every
// group below it, removed ones included: the kernel folds a removed
// group's usage into its parent's cpu.stat. A parent not made yet has
// used none.
func groupCPU(parent string) (time.Duration, bool) {
	root := unifiedRoot()
	if root == "" {
		return 0, false
	}
	b, err := os.ReadFile(filepath.Join(root, parent, "cpu.stat"))
	if os.IsNotExist(err) {
		return 0, true
	}
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			return time.Duration(atoi(v)) * time.Microsecond, true
		}
	}
	return 0, false
}

// unifiedRoot is where the cgroup2 tree is mounted: /sys/fs/cgroup on a
// pure cgroup2 host, its "unified" directory on a hybrid one; "" without.
func unifiedRoot() string {
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
			return root
		}
	}
	return ""
}

// treeCPU is the CPU time of pid and every process below it, live or
// reaped: each live process's own time and that of the children it
// reaped (a process reaped by a live one is in that one's cutime).
func treeCPU(pid int) time.Duration {
	var n int64
	for _, p := range append(descendants(pid), pid) {
		n += ticks(p, 11, 12, 13, 14)
	}
	return time.Duration(n) * clockTick
}

// keeperPID is the keeper serve started (`termgate __keeper`), a child
// of pid; 0 when there is none, whose CPU then reads 0.
func keeperPID(pid int) int {
	for _, c := range descendants(pid) {
		f, err := statFields(c)
		if err != nil || f[1] != strconv.Itoa(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c))
		if args := strings.Split(string(cmdline), "\x00"); len(args) > 1 && args[1] == "__keeper" {
			return c
		}
	}
	return 0
}

// ctxSwitches sums the voluntary and nonvoluntary context switches of
// every thread of pid.
func ctxSwitches(pid int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				n += atoi(v)
			} else if v, ok := strings.CutPrefix(line, "nonvoluntary_ctxt_switches:"); ok {
				n += atoi(v)
			}
		}
	}
	return n
}

// descendants are the live processes below pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f, err := statFields(p); err == nil {
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	for todo := children[pid]; len(todo) > 0; {
		p := todo[len(todo)-1]
		todo = append(todo[:len(todo)-1], children[p]...)
		out = append(out, p)
	}
	return out
}

// memory is a sample of the server's and its tree's memory.
type memory struct {
	serverRSS, treePSS int64 // kB
	// The server's RSS in the kernel's three parts, which add up to it:
	// anonymous memory (the Go heap, stacks and the runtime's own), shared
	// memory (the pages of the rings and input logs it maps, on tmpfs) and
	// file pages (its binary's).
	anon, shmem, file int64 // kB
	processes         int   // below the server
}

func sampleMemory(pid int) memory {
	kids := descendants(pid)
	st := statusKBs(pid, "VmRSS:", "RssAnon:", "RssShmem:", "RssFile:")
	m := memory{serverRSS: st[0], anon: st[1], shmem: st[2], file: st[3], treePSS: pssKB(pid), processes: len(kids)}
	for _, k := range kids {
		m.treePSS += pssKB(k)
	}
	return m
}

// statusKB is a kB field of /proc/PID/status.
func statusKB(pid int, field string) int64 {
	return statusKBs(pid, field)[0]
}

// statusKBs are kB fields of one read of /proc/PID/status, in the order
// asked; a field it lacks is 0.
func statusKBs(pid int, fields ...string) []int64 {
	out := make([]int64, len(fields))
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		for i, field := range fields {
			if v, ok := strings.CutPrefix(line, field); ok {
				out[i] = atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			}
		}
	}
	return out
}

// pssKB is pid's proportional set size.
func pssKB(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Pss:"); ok {
			return atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n
}
