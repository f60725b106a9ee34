//go:build linux

package files

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

const testUID, testGID = 3973001, 3973001

// newTree makes a workspace owned by the test tenant, and a file of
// root's beside it that the tenant must never reach; it returns the
// tree and the outside directory.
func newTree(t *testing.T) (*Tree, string) {
	t.Helper()
	if os.Getuid() != 0 {
		sandboxtest.Unavailable(t, "the files tests need root, to act as a tenant")
	}
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o711)
	os.Chmod(base, 0o711)
	ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
	os.Mkdir(ws, 0o755)
	os.Chown(ws, testUID, testGID)
	os.Mkdir(outside, 0o777) // writable by anyone: only the resolution keeps the tenant out
	os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o644)
	return New(ws, testUID, testGID), outside
}

func TestCleanRefusesWhatIsNotAPath(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]string{"": ".", "/": ".", "a//b/./c/": "a/b/c", "/x": "x", "a b\n\xff": "a b\n\xff"} {
		if got, err := Clean(p); err != nil || got != want {
			t.Errorf("Clean(%q) = %q, %v; want %q", p, got, err, want)
		}
	}
	for _, p := range []string{"..", "a/../b", "a\x00b", strings.Repeat("n", MaxName+1), strings.Repeat("d/", MaxDepth+1), strings.Repeat("x", MaxPath+1)} {
		if _, err := Clean(p); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("Clean(%.40q): %v, want ErrInvalidPath", p, err)
		}
	}
}

// TestWriteIsTheTenantsAndWhole: a written file is the tenant's, with its
// mode; a replace keeps the mode; a failed condition keeps the old file;
// no temporary file is left.
func TestWriteIsTheTenantsAndWhole(t *testing.T) {
	t.Parallel()
	tr, _ := newTree(t)
	e, err := tr.Write("dir/sub/a.txt", strings.NewReader("one"), WriteOptions{Mode: 0o750})
	if err != nil || e.Size != 3 || e.Mode != 0o750 || e.Type != TypeFile {
		t.Fatalf("Write: %+v, %v", e, err)
	}
	var st syscall.Stat_t
	syscall.Stat(filepath.Join(tr.dir, "dir/sub/a.txt"), &st)
	if st.Uid != testUID || st.Gid != testGID {
		t.Errorf("the file is %d:%d, want the tenant's", st.Uid, st.Gid)
	}
	syscall.Stat(filepath.Join(tr.dir, "dir"), &st)
	if st.Uid != testUID {
		t.Errorf("a directory made on the way is %d's", st.Uid)
	}
	if e2, err := tr.Write("dir/sub/a.txt", strings.NewReader("two!"), WriteOptions{}); err != nil || e2.Mode != 0o750 || e2.ETag() == e.ETag() {
		t.Errorf("a replace: %+v, %v; want the old mode and a new tag", e2, err)
	}
	_, err = tr.Write("dir/sub/a.txt", strings.NewReader("three"), WriteOptions{Check: func(old *Entry) error { return ErrChanged }})
	if !errors.Is(err, ErrChanged) {
		t.Errorf("a write whose check fails: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(tr.dir, "dir/sub/a.txt")); string(b) != "two!" {
		t.Errorf("after a refused write the file holds %q", b)
	}
	entries, more, err := tr.List("dir/sub", "", 100)
	if err != nil || more || len(entries) != 1 || entries[0].Name != "a.txt" {
		t.Errorf("the directory holds %+v (more %v, %v): want a.txt alone, no temporary file", entries, more, err)
	}
	if _, err := tr.Write("dir", strings.NewReader("x"), WriteOptions{}); !errors.Is(err, ErrIsDir) {
		t.Errorf("a write over a directory: %v", err)
	}
	if _, err := tr.Write("x", strings.NewReader("x"), WriteOptions{Mode: 0o4755}); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("a setuid mode: %v", err)
	}
}

// TestWriteVisibleWholeOrNotAtAll: while a write is under way, the path
// holds the old file; a reader failing mid-way leaves the old file and
// nothing else.
func TestWriteVisibleWholeOrNotAtAll(t *testing.T) {
	t.Parallel()
	tr, _ := newTree(t)
	if _, err := tr.Write("f", strings.NewReader("old"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 1)
	r := io.MultiReader(strings.NewReader("new part"), readerFunc(func([]byte) (int, error) {
		b, _ := os.ReadFile(filepath.Join(tr.dir, "f"))
		seen <- string(b)
		return 0, errors.New("the client went away")
	}))
	if _, err := tr.Write("f", r, WriteOptions{}); err == nil || !strings.Contains(err.Error(), "went away") {
		t.Errorf("a write whose body fails: %v", err)
	}
	if s := <-seen; s != "old" {
		t.Errorf("mid-write the file held %q", s)
	}
	if b, _ := os.ReadFile(filepath.Join(tr.dir, "f")); string(b) != "old" {
		t.Errorf("after a failed write the file holds %q", b)
	}
	if names, _ := os.ReadDir(tr.dir); len(names) != 1 {
		t.Errorf("a failed write left %v", names)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestNothingLeadsOut: "..", absolute and relative symlinks out, a
// symlinked directory out, and root's files inside are refused, for
// every operation; nothing outside changes.
func TestNothingLeadsOut(t *testing.T) {
	t.Parallel()
	tr, outside := newTree(t)
	rel, _ := filepath.Rel(tr.dir, outside)
	for name, target := range map[string]string{"abs": outside, "rel": rel, "absfile": filepath.Join(outside, "secret"), "relfile": filepath.Join(rel, "secret")} {
		if err := os.Symlink(target, filepath.Join(tr.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(tr.dir, "roots"), []byte("root's"), 0o600) // root's own file inside
	for _, p := range []string{"abs/secret", "rel/secret", "absfile", "relfile", "../outside/secret", "roots"} {
		if f, _, err := tr.Open(p); err == nil {
			f.Close()
			t.Errorf("Open(%q) opened it", p)
		} else if !errors.Is(err, ErrPermission) && !errors.Is(err, ErrInvalidPath) {
			t.Errorf("Open(%q): %v, want a refusal", p, err)
		}
	}
	for _, p := range []string{"abs/new", "rel/new", "absfile", "abs/secret"} {
		if _, err := tr.Write(p, strings.NewReader("tenant"), WriteOptions{}); err == nil && p != "absfile" {
			t.Errorf("Write(%q) wrote", p)
		}
		if _, err := tr.Mkdir(p + "dir"); err == nil && !strings.HasSuffix(p, "file") {
			t.Errorf("Mkdir(%q) made it", p+"dir")
		}
		tr.Remove(p, true)
		tr.Move("roots", p)
	}
	if _, _, err := tr.List("abs", "", 10); err == nil {
		t.Error("List through a symlink out listed")
	}
	if b, err := os.ReadFile(filepath.Join(outside, "secret")); err != nil || string(b) != "host" {
		t.Errorf("the outside file: %q, %v", b, err)
	}
	if names, _ := os.ReadDir(outside); len(names) != 1 {
		t.Errorf("outside now holds %v", names)
	}
	// Writing the symlink's own name replaces the link, not its target.
	if e, err := tr.Stat("absfile"); err != nil || e.Type != TypeFile {
		t.Errorf("absfile after a write of it: %+v, %v", e, err)
	}
	if err := tr.Remove("", true); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("Remove of the root: %v", err)
	}
}

// TestListPagesAndNames: entries come by name, a page at a time, with
// names of any bytes.
func TestListPagesAndNames(t *testing.T) {
	t.Parallel()
	tr, _ := newTree(t)
	names := []string{"a", "b\nnewline", "c\xffbad-utf8", "d"}
	for _, n := range names {
		if _, err := tr.Write("dir/"+n, bytes.NewReader([]byte(n)), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tr.Mkdir("dir/e")
	var got []string
	after := ""
	for range 10 {
		page, more, err := tr.List("dir", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			got = append(got, fmt.Sprintf("%s:%s", e.Name, e.Type))
			after = e.Name
		}
		if !more {
			break
		}
	}
	want := "a:file b\nnewline:file c\xffbad-utf8:file d:file e:dir"
	if strings.Join(got, " ") != want {
		t.Errorf("listed %q, want %q", got, want)
	}
	if _, _, err := tr.List("dir/a", "", 10); !errors.Is(err, ErrNotDir) {
		t.Errorf("List of a file: %v", err)
	}
	if _, _, err := tr.List("nope", "", 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("List of nothing: %v", err)
	}
}

// TestRemoveAndMove: a non-empty directory needs recursive; a move makes
// its way and replaces a file.
func TestRemoveAndMove(t *testing.T) {
	t.Parallel()
	tr, _ := newTree(t)
	tr.Write("d/x", strings.NewReader("x"), WriteOptions{})
	tr.Write("y", strings.NewReader("y"), WriteOptions{})
	if err := tr.Remove("d", false); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("Remove of a full directory: %v", err)
	}
	if e, err := tr.Move("d/x", "e/f/x"); err != nil || e.Name != "x" {
		t.Errorf("Move: %+v, %v", e, err)
	}
	if _, err := tr.Move("y", "e/f/x"); err != nil {
		t.Errorf("Move over a file: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(tr.dir, "e/f/x")); string(b) != "y" {
		t.Errorf("after the moves e/f/x holds %q", b)
	}
	if err := tr.Remove("e", true); err != nil {
		t.Errorf("recursive Remove: %v", err)
	}
	if err := tr.Remove("e", false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Remove of nothing: %v", err)
	}
}

// TestStaleUploadsAreSwept: an upload left a day without a change is
// removed by the next upload begun in its directory; a fresh one stays.
func TestStaleUploadsAreSwept(t *testing.T) {
	t.Parallel()
	tr, _ := newTree(t)
	stale, err := tr.StartUpload("d/old.bin")
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := tr.StartUpload("d/new.bin")
	if err != nil {
		t.Fatal(err)
	}
	_, name, _ := uploadName("d/old.bin", stale)
	long := time.Now().Add(-uploadStale - time.Hour)
	if err := os.Chtimes(filepath.Join(tr.dir, "d", name), long, long); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.StartUpload("d/next.bin"); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.UploadOffset("d/old.bin", stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the stale upload: %v, want it gone", err)
	}
	if _, err := tr.UploadOffset("d/new.bin", fresh); err != nil {
		t.Errorf("the fresh upload: %v", err)
	}
}
