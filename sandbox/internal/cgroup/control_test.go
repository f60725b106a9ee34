//go:build linux

package cgroup

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestControlFiles: a control file is read whole, however long, and
// written without being created; a missing one is an error that says
// which, and reads as nothing; one past maxControlFile is refused.
func TestControlFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	long := bytes.Repeat([]byte("12345\n"), 1000) // past the first buffer, twice over
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), long, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := readControl(filepath.Join(dir, "cgroup.procs")); err != nil || !bytes.Equal(got, long) {
		t.Errorf("readControl: %d bytes, %v; want the file's %d", len(got), err, len(long))
	}
	if pids := readPids(dir); len(pids) != 1000 || pids[999] != 12345 {
		t.Errorf("readPids listed %d pids", len(pids))
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte("1024\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(dir, "pids.max", "5"); err != nil {
		t.Fatal(err)
	}
	if got := readInt(dir, "pids.max"); got != 5024 { // written over the start, never truncated
		t.Errorf("after writing 5 over 1024 the file reads %d", got)
	}
	err := writeFile(dir, "memory.max", "1")
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join(dir, "memory.max")) {
		t.Errorf("writing a missing control file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "memory.max")); err == nil {
		t.Error("writing a missing control file created it")
	}
	if got, err := readControl(filepath.Join(dir, "memory.max")); err == nil || got != nil {
		t.Errorf("reading a missing control file: %q, %v", got, err)
	}
	if got := readInt(dir, "memory.max"); got != 0 {
		t.Errorf("a missing control file reads %d", got)
	}
	exact := filepath.Join(dir, "cgroup.events")
	if err := os.WriteFile(exact, make([]byte, maxControlFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := readControl(exact); err != nil || len(got) != maxControlFile {
		t.Errorf("a control file of maxControlFile bytes: %d bytes, %v", len(got), err)
	}
	huge := filepath.Join(dir, "cgroup.threads")
	if err := os.WriteFile(huge, make([]byte, maxControlFile+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := readControl(huge); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a control file past maxControlFile: %d bytes, %v", len(got), err)
	}
}
