//go:build linux

// Package v1thread moves the calling OS thread, alone, into cgroup v1
// directories and back, so that a child it forks is born in them.
//
// Nothing can be forked into a v1 directory (clone3's CLONE_INTO_CGROUP
// takes a cgroup2 one), and moving another task there (writing its pid
// to cgroup.procs) takes the kernel's global cgroup_threadgroup_rwsem for
// writing, which waits a whole RCU grace period after a quiet moment.
// A thread that writes "0" to a v1 directory's tasks file moves only
// itself, and the kernel skips that lock for it; a child forked then
// inherits the thread's v1 cgroups. The caller must hold the thread
// (runtime.LockOSThread) from the first Enter to the last Return.
//
// The package imports nothing of termgate: the keeper uses it too.
package v1thread

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Homes are the calling thread's directories in each cgroup v1
// hierarchy, read once: where Return takes it back.
type Homes struct {
	homes map[string]string // mount point of a v1 hierarchy -> the thread's directory in it
}

// mount is one cgroup v1 hierarchy as mounted here.
type mount struct {
	point string   // where it is mounted
	root  string   // the hierarchy's directory mounted there
	ctls  []string // its controllers (and name=...), from the super options
}

// mounts caches the v1 mounts: they are read once per process.
var mounts struct {
	once sync.Once
	list []mount
	err  error
}

// Load reads the calling thread's v1 directories. Call it on the thread
// that will Enter and Return.
func Load() (*Homes, error) {
	mounts.once.Do(func() { mounts.list, mounts.err = readMounts("/proc/self/mountinfo") })
	if mounts.err != nil {
		return nil, mounts.err
	}
	data, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("v1thread: %w", err)
	}
	return homesOf(mounts.list, string(data)), nil
}

// readMounts lists the cgroup v1 mounts of mountinfo.
func readMounts(path string) ([]mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("v1thread: %w", err)
	}
	defer f.Close()
	var list []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root point options [optional...] - type source super
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 3 || tail[0] != "cgroup" {
			continue
		}
		list = append(list, mount{point: unescape(fields[4]), root: unescape(fields[3]), ctls: strings.Split(tail[2], ",")})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("v1thread: read %s: %w", path, err)
	}
	return list, nil
}

// unescape undoes mountinfo's octal escapes of space, tab, newline and
// backslash.
func unescape(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// homesOf maps each mount to the thread's directory in its hierarchy,
// from the lines "id:controllers:path" of /proc/thread-self/cgroup. A
// hierarchy whose line is missing, or whose path lies outside the
// mounted root, has no home: nothing in it is entered.
func homesOf(list []mount, cgroup string) *Homes {
	h := &Homes{homes: map[string]string{}}
	for line := range strings.SplitSeq(cgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[1] == "" {
			continue // the cgroup2 line, or none
		}
		ctls := strings.Split(parts[1], ",")
		for _, m := range list {
			if !containsAll(m.ctls, ctls) {
				continue
			}
			rel, err := filepath.Rel(m.root, parts[2])
			if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				continue
			}
			h.homes[m.point] = filepath.Join(m.point, rel)
		}
	}
	return h
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// home returns the thread's directory in dir's hierarchy.
func (h *Homes) home(dir string) (string, bool) {
	if home, ok := h.lookup(dir); ok {
		return home, true
	}
	// A hierarchy reached through a symbolic link (/sys/fs/cgroup/cpu to
	// cpu,cpuacct on some hosts).
	real, err := filepath.EvalSymlinks(dir)
	if err != nil || real == dir {
		return "", false
	}
	return h.lookup(real)
}

// lookup finds the mount point that dir lies strictly below.
func (h *Homes) lookup(dir string) (string, bool) {
	for point, home := range h.homes {
		if strings.HasPrefix(dir, point+"/") {
			return home, true
		}
	}
	return "", false
}

// Enter moves the calling thread into each of dirs it can (writing "0"
// to DIR/tasks) and returns those it entered, in order. A directory
// outside every hierarchy with a home, or one the kernel refuses, is
// skipped: the caller moves its child there instead.
func (h *Homes) Enter(dirs []string) []string {
	var entered []string
	for _, dir := range dirs {
		if _, ok := h.home(dir); !ok {
			continue
		}
		if writeTasks(dir) == nil {
			entered = append(entered, dir)
		}
	}
	return entered
}

// Return moves the calling thread back home in the hierarchy of each of
// entered. An error means the thread still sits in some of them.
func (h *Homes) Return(entered []string) error {
	var errs []error
	for _, dir := range entered {
		home, ok := h.home(dir)
		if !ok {
			errs = append(errs, fmt.Errorf("v1thread: no home for %s", dir))
			continue
		}
		errs = append(errs, writeTasks(home))
	}
	return errors.Join(errs...)
}

// writeTasks moves the calling thread alone into dir. The file is
// written on a plain descriptor: through os.File, the runtime's poller
// would take the pollable control file in and out again, four system
// calls more on the forking thread, six times a fork.
func writeTasks(dir string) error {
	path := filepath.Join(dir, "tasks")
	// O_WRONLY without O_CREAT or O_TRUNC, as the kernel wants it.
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	for errors.Is(err, unix.EINTR) {
		fd, err = unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return fmt.Errorf("v1thread: open %s: %w", path, err)
	}
	for _, err = unix.Write(fd, []byte("0")); errors.Is(err, unix.EINTR); {
		_, err = unix.Write(fd, []byte("0"))
	}
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("v1thread: enter %s: %w", dir, err)
	}
	return nil
}
