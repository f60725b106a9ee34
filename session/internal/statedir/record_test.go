package statedir

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestStateFilesRefuseLinks: a file of an execution's state directory
// that is a symbolic link is never followed: the ring and the input log
// are not mapped through one, a record not read through one, and a
// record's replacement does not write through a planted temporary name.
func TestStateFilesRefuseLinks(t *testing.T) {
	t.Parallel()
	const size = 1 << 16
	plant := func(t *testing.T, name string) (dir, target string) {
		dir, target = t.TempDir(), filepath.Join(t.TempDir(), "target")
		if err := os.WriteFile(target, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		return dir, target
	}
	unchanged := func(t *testing.T, target string) {
		t.Helper()
		if b, err := os.ReadFile(target); err != nil || !bytes.Equal(b, make([]byte, size)) {
			t.Errorf("the link's target was changed (%d bytes, %v)", len(b), err)
		}
	}
	for _, name := range []string{"ring", "input"} {
		t.Run("map "+name, func(t *testing.T) {
			t.Parallel()
			dir, target := plant(t, name)
			mem, err := mapFile(dir, name, size, false)
			if err == nil {
				mem[0] = 'x'
				t.Fatalf("mapFile mapped %s through a symbolic link", name)
			}
			t.Log(err)
			unchanged(t, target)
		})
	}
	t.Run("read record", func(t *testing.T) {
		t.Parallel()
		dir, target := plant(t, "record.json")
		os.WriteFile(target, []byte(`{"version":1,"owner":"t","id":"x"}`), 0o600)
		if rec, err := ReadRecord[struct{}, struct{}](dir); err == nil {
			t.Fatalf("ReadRecord read %+v through a symbolic link", rec)
		}
	})
	t.Run("replace record", func(t *testing.T) {
		t.Parallel()
		dir, target := plant(t, "record.json.tmp")
		if err := WriteRecord(dir, &Record[struct{}, struct{}]{Owner: "t", ID: "x", Started: time.Now()}, false); err != nil {
			t.Fatal(err)
		}
		unchanged(t, target)
		if rec, err := ReadRecord[struct{}, struct{}](dir); err != nil || rec.ID != "x" {
			t.Fatalf("record read back: %+v, %v", rec, err)
		}
	})
}
