package statedir

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestInputLogTakesNoPageUntilInput: a fresh input file stays a hole,
// no page of memory, until the first input accepted writes its header;
// a header of zeros reads as a log that had no input, and one with
// offsets but no magic as no input file.
func TestInputLogTakesNoPageUntilInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mem, err := mapFile(dir, "input", InputLogSize(4096), true)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	NewInputLog(mem)
	if blocks := fileBlocks(t, filepath.Join(dir, "input")); blocks != 0 {
		t.Errorf("a fresh input file holds %d blocks", blocks)
	}
	// Read back before any input, as a restart reads it: its first accept
	// still lays the header.
	l, pending, err := OpenInputLog(mem)
	if err != nil || l.AcceptedAt() != 0 || len(pending) != 0 {
		t.Fatalf("a log without input: accepted %v, pending %q, %v", l, pending, err)
	}
	l.Accept(0, []byte("ls\n"))
	if blocks := fileBlocks(t, filepath.Join(dir, "input")); blocks == 0 {
		t.Error("the input file holds no block after input")
	}
	got, pending, err := OpenInputLog(mem)
	if err != nil || got.accepted.Load() != 3 || string(pending) != "ls\n" {
		t.Fatalf("after input: %v, pending %q", err, pending)
	}
	clear(mem[:8]) // the magic
	if _, _, err := OpenInputLog(mem); err == nil {
		t.Error("a header with offsets and no magic was read as an input file")
	}
}

// fileBlocks is the 512-byte blocks a file holds.
func fileBlocks(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks
}
