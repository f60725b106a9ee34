//go:build linux

package keeper

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestForkingThreadHasItsOwnTable: beside idle children whose parent
// ends the keeper holds, one thread of the keeper, the forking one, has a
// small table of its own, and a spawn still gets exactly its files.
func TestForkingThreadHasItsOwnTable(t *testing.T) {
	t.Parallel()
	_, ks := startKeeper(t)
	c := ks.dial(t)
	defer c.Detach()
	const idle = 20
	spawnIdle(t, c, devNull(t), idle)
	if out := spawnOutput(t, c, "fds", "/bin/sh", "-c", `i=3; while [ $i -lt 256 ]; do [ -e /proc/$$/fd/$i ] && echo "open $i"; i=$((i+1)); done`); out != "" {
		t.Errorf("a child got descriptors beyond its files:\n%s", out)
	}
	pid := ks.last().cmd.Process.Pid
	process := countFds(t, "/proc/"+strconv.Itoa(pid)+"/fd")
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	var own []int
	for _, task := range tasks {
		if n := countFds(t, filepath.Join("/proc", strconv.Itoa(pid), "task", task.Name(), "fd")); n != process {
			own = append(own, n)
		}
	}
	// 0-2, the poller's two, the passing socket, the mount namespace, its
	// mountinfo and the lean copy these children were forked from.
	if len(own) != 1 || own[0] > 9 || process < 2*idle {
		t.Errorf("the keeper's table holds %d descriptors; threads with tables of their own hold %v, want one of at most 9", process, own)
	}
}

// spawnOutput runs args[0] with its standard output and error on a pipe
// and returns what it wrote.
func spawnOutput(t *testing.T, c *Client, key, path string, args ...string) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = c.Spawn(t.Context(), SpawnRequest{Key: key, Path: path, Args: append([]string{path}, args...), Files: []*os.File{devNull(t), w, w}})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	<-c.Exit(key)
	if err := c.Forget(key); err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// countFds counts the entries of an fd directory under /proc.
func countFds(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// TestTakeFilesChecksTheCount: descriptors that do not match the request
// are refused and closed, never forked with.
func TestTakeFilesChecksTheCount(t *testing.T) {
	t.Parallel()
	ends, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFds(ends[:])
	null := devNull(t)
	fd := int(null.Fd())
	if err := passFiles(ends[1], []int{fd, fd}); err != nil {
		t.Fatal(err)
	}
	if got, err := takeFiles(ends[0], 3); err == nil {
		closeFds(got)
		t.Fatalf("took %v for a request of 3 files", got)
	}
	if err := passFiles(ends[1], nil); err != nil {
		t.Fatal(err)
	}
	if got, err := takeFiles(ends[0], 0); err != nil || len(got) != 0 {
		t.Fatalf("no files: %v, %v", got, err)
	}
	if err := passFiles(ends[1], []int{fd}); err != nil {
		t.Fatal(err)
	}
	got, err := takeFiles(ends[0], 1)
	if err != nil || len(got) != 1 || got[0] == fd {
		t.Fatalf("one file: %v, %v", got, err)
	}
	closeFds(got)
}
