//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// writeFile writes one control file. It never creates the file: a missing
// control file means a missing feature, not something to make up.
func writeFile(dir, file, value string) error {
	path := filepath.Join(dir, file)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(value)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is already in our message
		}
		return fmt.Errorf("cgroup: write %s: %w", path, err)
	}
	return nil
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
	data, _ := os.ReadFile(filepath.Join(dir, file))
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
	data, _ := os.ReadFile(filepath.Join(dir, file))
	n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n
}

// readPids lists cgroup.procs; a directory already gone lists nothing.
func readPids(dir string) []int {
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}
