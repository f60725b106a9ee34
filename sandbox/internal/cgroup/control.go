//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Control files are read and written on plain descriptors, never
// through os.File: the kernel's control files can be polled, so the
// runtime's poller would take each one in (and out again) for its one
// read or write, four system calls more a file, a dozen files a start.

// writeFile writes one control file. It never creates the file: a missing
// control file means a missing feature, not something to make up.
func writeFile(dir, file, value string) error {
	path := filepath.Join(dir, file)
	fd, err := openControl(path, unix.O_WRONLY)
	if err == nil {
		var n int
		for n, err = unix.Write(fd, []byte(value)); errors.Is(err, unix.EINTR); {
			n, err = unix.Write(fd, []byte(value))
		}
		if err == nil && n < len(value) {
			err = io.ErrShortWrite
		}
		unix.Close(fd) // a control file's write succeeded or failed already
	}
	if err != nil {
		return fmt.Errorf("cgroup: write %s: %w", path, err)
	}
	return nil
}

// readControl reads a whole control file; an error says why not.
func readControl(path string) ([]byte, error) {
	fd, err := openControl(path, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) > maxControlFile {
			return nil, fmt.Errorf("cgroup: %s is larger than %d bytes", path, maxControlFile)
		}
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, len(buf))
		}
		// At most one byte past the bound: enough to tell a file of exactly
		// the bound from a larger one.
		n, err := unix.Read(fd, buf[len(buf):min(cap(buf), maxControlFile+1)])
		switch {
		case errors.Is(err, unix.EINTR):
		case err != nil:
			return nil, err
		case n == 0:
			return buf, nil
		default:
			buf = buf[:len(buf)+n]
		}
	}
}

// maxControlFile bounds a control file read: cgroup.procs lists at most
// a group's pids ceiling, and no other is near it.
const maxControlFile = 4 << 20

// openControl opens a control file, retrying an interrupted open.
func openControl(path string, mode int) (int, error) {
	for {
		fd, err := unix.Open(path, mode|unix.O_CLOEXEC, 0)
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

// writeIfExists writes a control file that only some kernels or
// configurations provide (swap accounting).
func writeIfExists(dir, file, value string) error {
	if !fileExists(dir, file) {
		return nil
	}
	return writeFile(dir, file, value)
}

// fileExists reports whether dir has the control file.
func fileExists(dir, file string) bool {
	_, err := os.Stat(filepath.Join(dir, file))
	return err == nil
}

// readKey reads the number after key in a "key value" per line file such
// as memory.events; absent file or key reads as zero.
func readKey(dir, file, key string) int64 {
	data, _ := readControl(filepath.Join(dir, file))
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// readInt reads a file holding a single number; absent reads as zero.
func readInt(dir, file string) int64 {
	data, _ := readControl(filepath.Join(dir, file))
	n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n
}

// readPids lists cgroup.procs; a directory already gone lists nothing.
func readPids(dir string) []int {
	data, _ := readControl(filepath.Join(dir, "cgroup.procs"))
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}
